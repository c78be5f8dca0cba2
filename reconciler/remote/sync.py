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
    unreadable: list[str] = field(default_factory=list)
    """Lock files that could not be read (`FILE:LINE:COL: why`): their specs were skipped."""

    def to_json(self) -> dict[str, Any]:
        unreadable = {"unreadable": self.unreadable} if self.unreadable else {}
        return {"done": self.done, "present": self.present, "absent": self.absent, **unreadable}


def recorded(specs: list[LoadedSpec], unreadable: list[str]) -> dict[str, Record]:
    """key -> the lock's record of it, over every variant of every spec (identity stages left out); a
    lock file that cannot be read is named in `unreadable` and its spec skipped."""
    out: dict[str, Record] = {}
    for spec in specs:
        try:
            lock = lockread.read(Layout.lock_file(spec.path))
        except lockfile.LockUnreadable as exc:
            unreadable.append(str(exc))
            continue
        for variant in (lock.variants if lock is not None else {}).values():
            for name, stage in variant.stages.items():
                record = variant.record(name)
                if record is not None and not stage.identity:
                    out.setdefault(stage.key, record)
    return dict(sorted(out.items()))


def push(ws: Workspace, specs: list[LoadedSpec]) -> SyncResult:
    assert ws.remote is not None
    result = SyncResult()
    for key in recorded(specs, result.unreadable):
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
    for key, lock_record in recorded(specs, result.unreadable).items():
        if ws.usable(ws.db.record(key)):
            result.present.append(key)
            continue
        hit = layer.lookup(ws, key, lock_record.key_inputs, lock_record)
        if ws.remote.down is not None:
            break  # not known to be absent: the remote failed (the command says how)
        (result.done if hit is not None else result.absent).append(key)
    return result
