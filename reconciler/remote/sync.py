"""`npuctl push` / `npuctl pull`: move every stage the specs' committed lock files record.

The lock files are the list: what a clone needs is exactly what its locks name. Push sends each
recorded stage this machine holds (verified) that the remote lacks; pull fetches each one the local
store lacks (verified). Identity stages are not moved: any machine re-derives them.

Moving bytes needs no spec to be valid: the lock file beside each spec file names what to move, so
neither validates a spec nor reads a model (a fresh clone would otherwise summarise every model
before its first byte moved). Push asks the remote which records it holds in one listing, so a
push with nothing new costs one remote call whatever the number of stages; none at all when this
machine already pushed, fetched or saw listed there every recorded stage (Database.remote_records),
which is what a push right after a build or a pull finds. That record can only be wrong when someone
else removes records from the remote; `push --verify` lists the remote and corrects it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.repo import Layout
from reconciler.state import lockfile, lockread, statcache
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
    known: bool = False
    """`present` is this machine's record of the remote, not an answer of the remote (push)."""

    def to_json(self) -> dict[str, Any]:
        unreadable = {"unreadable": self.unreadable} if self.unreadable else {}
        known = {"present_by_record": True} if self.known else {}
        return {"done": self.done, "present": self.present, "absent": self.absent, **unreadable, **known}


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


def push(ws: Workspace, spec_files: Sequence[Path], verify: bool = False) -> SyncResult:
    """Sends what the remote lacks. When this machine's record of the remote (Database.remote_records)
    already holds every recorded key, nothing is asked: the push sends nothing and says so (`known`;
    not with the caches off, statcache.enabled, where every answer is asked for again).
    Otherwise one listing of the records says which are there. `verify` asks whatever the record says,
    lists the objects too and sends again the artifacts a record there lacks; either listing corrects
    the record."""
    assert ws.remote is not None
    result = SyncResult()
    wanted = recorded(spec_files, result.unreadable)
    identity = ws.remote.config.identity
    known = ws.db.remote_records(identity) if statcache.enabled() and not verify else set()
    if wanted and known.issuperset(wanted):
        result.present, result.known = list(wanted), True
        return result
    if not wanted or not ws.remote.config.writable:
        return result
    there = ws.remote.record_keys()
    objects = ws.remote.object_digests() if verify else None
    if ws.remote.down is not None:
        return result
    for key, lock_record in wanted.items():
        if key in there and (objects is None or _whole(lock_record, objects)):
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
    gone = (ws.db.remote_records(identity) - there - set(result.done)) | set(result.absent)
    ws.db.saw_on_remote(identity, set(result.present), gone)
    return result


def _whole(record: Record, objects: set[str]) -> bool:
    """Every artifact `record` names is among `objects`."""
    return all(meta.get("digest") in objects for meta in record.artifacts.values())


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
