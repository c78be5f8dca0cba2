"""`npuctl push` / `npuctl pull`: move every stage the specs' committed lock files record.

The lock files are the list: what a clone needs is exactly what its locks name. Push sends each
recorded stage this machine holds (verified) that the remote lacks; pull fetches each one the local
store lacks (verified). Identity stages are not moved: any machine re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import lockfile, lockread
from reconciler.state.db import Record


@dataclass
class SyncResult:
    done: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    """Already where they had to go."""
    absent: list[str] = field(default_factory=list)
    """Not at the source (push: not built here; pull: not on the remote)."""

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "present": self.present, "absent": self.absent}


def _every_stage(entry: dict[str, Any]) -> dict[str, str]:
    """Which keys to move names every recorded stage: the remote layer vets each record it reads."""
    return {}


def recorded(specs: list[LoadedSpec]) -> dict[str, Record]:
    """key -> the lock's record of it, over every variant of every spec (identity stages left out)."""
    out: dict[str, Record] = {}
    for spec in specs:
        lock = lockfile.read(Layout.lock_file(spec.path))
        for variant in lockread.variants(lock, _every_stage).values():
            for name, stage in variant.stages.items():
                record = variant.record(name)
                if record is not None and not stage.identity:
                    out.setdefault(stage.key, record)
    return dict(sorted(out.items()))


def push(ws: Workspace, specs: list[LoadedSpec]) -> SyncResult:
    assert ws.remote is not None
    result = SyncResult()
    for key in recorded(specs):
        local = ws.db.record(key)
        if not ws.usable(local):
            result.absent.append(key)
            continue
        assert local is not None
        if ws.remote.has_record(key):
            result.present.append(key)
        elif layer.publish(ws, local):
            result.done.append(key)
        if ws.remote.down is not None:
            break
    return result


def pull(ws: Workspace, specs: list[LoadedSpec]) -> SyncResult:
    assert ws.remote is not None
    result = SyncResult()
    for key, lock_record in recorded(specs).items():
        if ws.usable(ws.db.record(key)):
            result.present.append(key)
            continue
        hit = layer.lookup(ws, key, lock_record.key_inputs, lock_record)
        (result.done if hit is not None else result.absent).append(key)
        if ws.remote.down is not None:
            break
    return result
