"""fsck: check everything npuctl keeps against what it claims, and repair by rebuilding.

Every store object is re-hashed in full (no cache: this is the check that catches a flipped bit the
file-hash cache cannot see), the database runs SQLite's own integrity check, and every record, head
and lock file is checked for the objects it names. A corrupt object is quarantined (moved to
`.npuctl/corrupt/`); the caller then re-applies the specs, which rebuilds exactly the stages whose
outputs went missing, under the same keys (builds are reproducible, so lock files do not change).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reconciler.engine.gc import lock_files
from reconciler.engine.workspace import Workspace
from reconciler.state import lockfile
from reconciler.state.store import sha256_file

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class FsckReport:
    objects: int = 0
    corrupt: list[str] = field(default_factory=list)
    """Objects whose content no longer matches their name (quarantined unless check-only)."""
    misnamed: list[str] = field(default_factory=list)
    """Store entries that are not named by a digest (left alone, reported)."""
    database: str = "ok"
    """SQLite's integrity_check verdict."""
    missing: list[str] = field(default_factory=list)
    """"<what>: <digest>" for heads, and lock-file entries this machine built, naming an object the store lacks."""
    lock_only: int = 0
    """Objects the lock files record that no local record names: built elsewhere (normal on a fresh
    clone, where the lock is the record); apply builds them when a later stage needs the bytes."""
    unreadable: list[str] = field(default_factory=list)
    """Lock files that cannot be read (`FILE:LINE:COL: why`): reported, never rewritten."""

    @property
    def clean(self) -> bool:
        found = self.corrupt or self.misnamed or self.missing or self.unreadable
        return not found and self.database == "ok"


def check(ws: Workspace, quarantine: bool = True) -> FsckReport:
    report = FsckReport()
    for digest in ws.store.digests():
        report.objects += 1
        path = ws.store.path(digest)
        if not _DIGEST.match(digest):
            report.misnamed.append(str(path))
            continue
        try:
            actual = sha256_file(path)
        except OSError:
            actual = ""
        if actual != digest:
            report.corrupt.append(digest)
            if quarantine:
                ws.hasher.forget(path)
                ws.store.quarantine(digest, ws.layout.state_dir / "corrupt")
    report.database = ws.db.integrity()
    present = {d for d in ws.store.digests()}
    heads = ws.db.head_keys()
    for record in ws.db.all_records():
        for meta in record.artifacts.values():
            if meta["digest"] not in present and record.key in heads:
                report.missing.append(f"head {record.stage} {record.key[:12]}: {meta['digest']}")
    built_here = {meta["digest"] for record in ws.db.all_records() for meta in record.artifacts.values()}
    for path in lock_files(ws.layout.root):
        try:
            data = lockfile.read(path)
        except lockfile.LockUnreadable as exc:
            report.unreadable.append(str(exc))
            continue
        for digest in sorted(lockfile.digests(data or {}) - present):
            if digest in built_here:
                report.missing.append(f"{path.relative_to(ws.layout.root)}: {digest}")
            else:
                report.lock_only += 1
    return report
