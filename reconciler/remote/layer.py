"""The remote as a layer under the local store: what resolve and apply call, never the backends.

`lookup` runs when a stage's key has no usable local record. In apply it downloads the record and
every artifact the local store lacks (each verified), then records it in state.db: from there on the
stage is an ordinary local cache hit. In plan (`ws.remote_fetch` False) it reads only the record, so
plan can say "in the remote cache" without moving artifacts. `publish` pushes what a build produced.
Both note the key in this machine's record of what the remote holds (Database.remote_records).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reconciler.state.db import Record

if TYPE_CHECKING:
    from reconciler.engine.workspace import Workspace


def lookup(ws: Workspace, key: str, key_inputs: dict[str, Any], lock_record: Record | None) -> Record | None:
    remote = ws.remote
    if remote is None:
        return None
    record = remote.record(key, ws.trust)
    if record is None:
        return None
    record = replace(record, key_inputs=key_inputs)
    if lock_record is not None:
        theirs = {n: a["digest"] for n, a in record.artifacts.items()}
        ours = {n: a.get("digest") for n, a in lock_record.artifacts.items()}
        if theirs != ours:
            remote.warn(
                f"remote {remote.url}: record {key[:12]} names other artifacts than the lock file: ignored"
            )
            return None
    if not ws.remote_fetch:
        return record
    tmp = ws.layout.tmp
    for meta in sorted(record.artifacts.values(), key=lambda m: str(m["digest"])):
        if ws.intact(meta["digest"]):
            continue
        if not remote.fetch_object(meta["digest"], int(meta["size"]), ws.store, tmp):
            remote.miss(key, broken=remote.down is None)  # until this run pushes a good copy
            return None
    ws.db.put_record(record)
    ws.db.saw_on_remote(remote.config.identity, [key])
    return record


def broken(ws: Workspace, key: str) -> bool:
    """Whether the remote holds a copy of `key` that did not verify: apply rebuilds it (even where
    the lock alone would do) so that the next push replaces it."""
    return ws.remote is not None and key in ws.remote.broken


def publish(ws: Workspace, record: Record) -> bool:
    """Pushes a record built (or verified) here; False when there is no writable remote or it failed."""
    if ws.remote is None or not ws.usable(record):
        return False
    if not ws.remote.push(record, ws.store, ws.layout.tmp, ws.trust):
        return False
    ws.db.saw_on_remote(ws.remote.config.identity, [record.key])
    return True
