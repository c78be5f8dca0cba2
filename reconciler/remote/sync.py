"""`npuctl push` / `npuctl pull`: move every stage the specs' committed lock files record.

The lock files are the list: what a clone needs is exactly what its locks name. Push sends each
recorded stage this machine holds (verified) that the remote lacks; pull fetches each one the local
store lacks (verified). Identity stages are not moved: any machine re-derives them.

Moving bytes needs no spec to be valid: the lock file beside each spec file names what to move, so
neither validates a spec nor reads a model (a fresh clone would otherwise summarise every model
before its first byte moved). Push asks the remote which records it holds in one listing, so a
push with nothing new costs one remote call whatever the number of stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.repo import Layout
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


def recorded(spec_files: Sequence[Path], unreadable: list[str]) -> dict[str, Record]:
    """key -> the lock's record of it, over every variant of the lock file beside each spec file
    (identity stages left out; a spec without a lock file records nothing); a lock file that cannot be
    read is named in `unreadable` and its spec skipped."""
    out: dict[str, Record] = {}
    for spec_file in spec_files:
        try:
            lock = lockread.read(Layout.lock_file(spec_file))
        except lockfile.LockUnreadable as exc:
            unreadable.append(str(exc))
            continue
        for variant in (lock.variants if lock is not None else {}).values():
            for name, stage in variant.stages.items():
                record = variant.record(name)
                if record is not None and not stage.identity:
                    out.setdefault(stage.key, record)
    return dict(sorted(out.items()))


def push(ws: Workspace, spec_files: Sequence[Path]) -> SyncResult:
    assert ws.remote is not None
    result = SyncResult()
    wanted = recorded(spec_files, result.unreadable)
    there = ws.remote.record_keys() if wanted and ws.remote.config.writable else set()
    if ws.remote.down is not None:
        return result
    for key in wanted:
        if key in there:
            result.present.append(key)
            continue
        local = ws.db.record(key)
        if not ws.usable(local):
            result.absent.append(key)
            continue
        assert local is not None
        if layer.publish(ws, local):
            result.done.append(key)
        if ws.remote.down is not None:
            break
    return result


def pull(ws: Workspace, spec_files: Sequence[Path]) -> SyncResult:
    assert ws.remote is not None
    result = SyncResult()
    for key, lock_record in recorded(spec_files, result.unreadable).items():
        if ws.usable(ws.db.record(key)):
            result.present.append(key)
            continue
        hit = layer.lookup(ws, key, lock_record.key_inputs, lock_record)
        if ws.remote.down is not None:
            break  # not known to be absent: the remote failed (the command says how)
        (result.done if hit is not None else result.absent).append(key)
    return result
