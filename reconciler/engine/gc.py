"""gc: remove store objects that no lock file, head record or recorded verdict refers to."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from backends.sdk import outside_tmp
from reconciler.engine.workspace import Workspace
from reconciler.state import lockfile

STALE_TEMP_S = 3600


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    kept: int = 0
    dropped_records: int = 0
    temp_removed: list[str] = field(default_factory=list)


def lock_files(root: Path) -> list[Path]:
    skip = {".git", ".npuctl", "node_modules", ".venv"}
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        out += [Path(dirpath) / f for f in filenames if f.endswith(".lock.json")]
    return out


JUDGED = ("compile", "evaluate")
"""What a recorded verdict refers to: the artifact it judged and the measurements it was judged on.
Intermediates of superseded versions (imports, quantized models) are collectable once no lock file or
head names them; the verdict itself stays in the ledger and in the lock file's git history."""


def referenced(ws: Workspace) -> set[str]:
    """Digests to keep: lock files, the heads (last build per stage), and what logged verdicts judged."""
    keep: set[str] = set()
    for path in lock_files(ws.layout.root):
        data = lockfile.read(path)
        if data is not None:
            keep |= lockfile.digests(data)
    keys = set(ws.db.head_keys())
    for entry in ws.db.ledger():
        if entry["stage"] == "verify":
            judged = entry["data"].get("keys", {})
            keys |= {k for name, k in judged.items() if k and name.rsplit("/", 1)[-1] in JUDGED}
    for key in keys:
        record = ws.db.record(key)
        if record is not None:
            keep |= {a["digest"] for a in record.artifacts.values()}
    return keep


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_temp(ws: Workspace) -> list[Path]:
    now = time.time()
    out = [p for p in ws.store.stale_temp_files() if now - p.stat().st_mtime > STALE_TEMP_S]
    if ws.layout.tmp.is_dir():
        for workdir in ws.layout.tmp.iterdir():
            pid = workdir.name.split("-", 1)[0]
            if not pid.isdigit() or not _pid_alive(int(pid)):
                out += outside_tmp.leftovers(workdir) if workdir.is_dir() else []
                out.append(workdir)
    return out


def collect_garbage(ws: Workspace, dry_run: bool) -> GcReport:
    report = GcReport()
    keep = referenced(ws)
    for digest in ws.store.digests():
        if digest in keep:
            report.kept += 1
            continue
        report.removed.append(digest)
        report.freed_bytes += ws.store.size(digest)
    report.temp_removed = [str(p) for p in _stale_temp(ws)]
    if dry_run:
        return report
    for digest in report.removed:
        ws.store.remove(digest)
    gone = set(report.removed)
    dead = [r.key for r in ws.db.all_records() if any(a["digest"] in gone for a in r.artifacts.values())]
    ws.db.delete_records(dead)
    report.dropped_records = len(dead)
    for path in map(Path, report.temp_removed):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return report
