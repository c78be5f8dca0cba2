"""specs/NAME.lock.json: what was built and measured for a spec, meant to be committed.

Deterministic (sorted keys, no timestamps), so an apply that rebuilt nothing leaves it byte-identical
and a pull-request diff shows exactly what changed.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy
from reconciler.records.lock_format import FORMAT_VERSION as FORMAT_VERSION

LOCK_MODE = 0o644


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


MAX_BYTES = 64 << 20
"""A lock file larger than this is not read (a repository's files are untrusted, sizes are bounded)."""


def read(path: Path) -> dict[str, Any] | None:
    """The lock file's content; None when absent or unreadable (it is then rewritten on apply).

    A symlink is never followed (a committed `x.lock.json -> /etc/...` reads nothing outside; apply
    replaces the link itself), and only a regular file is read (backends.sdk.pathpolicy)."""
    if path.is_symlink():
        return None
    try:
        with pathpolicy.open_regular(path) as fh:
            data = json.loads(fh.read(MAX_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError):  # PathRefused is a ValueError
        return None
    return data if isinstance(data, dict) else None


def unchanged(path: Path, data: dict[str, Any]) -> bool:
    """Whether the lock file already holds exactly `data` (as JSON would read it back)."""
    return holds(read(path), data)


def holds(old: dict[str, Any] | None, data: dict[str, Any]) -> bool:
    """Whether the lock content `old` (as read) is exactly `data` (as JSON would read it back)."""
    return old is not None and old == json.loads(json.dumps(data))


def write(path: Path, data: dict[str, Any]) -> bool:
    """Atomically replace the lock file; returns False (and writes nothing) when content is unchanged.

    The comparison parses the old file rather than formatting the new one: indented JSON is produced
    by the slow pure-Python encoder, and a no-op apply over many specs should not pay for it.
    """
    if unchanged(path, data):
        return False
    text = dumps(json.loads(json.dumps(data)))
    _remove_leftovers(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, LOCK_MODE)  # mkstemp makes 0600; a committed file is world-readable like its spec
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def _remove_leftovers(path: Path) -> None:
    """Temp files of this lock that a killed writer left beside it (kill -9 between write and rename).

    The caller holds the spec's lock, so no other writer of this lock file is live: every such file is
    dead, and left alone it would sit untracked in the user's repository until `git add -A` took it.
    """
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def digests(data: dict[str, Any]) -> set[str]:
    """Every store object a lock file refers to, read from the file as parsed rather than through the
    typed view (reconciler.state.lockread), which drops a stage it cannot use: gc keeps, and fsck
    checks, every object a committed file names, even in a lock that fails its checks."""
    out: set[str] = set()
    for variant in (data.get("variants") or {}).values():
        for stage in (variant.get("stages") or {}).values():
            for artifact in (stage.get("artifacts") or {}).values():
                if isinstance(artifact, dict) and "digest" in artifact:
                    out.add(artifact["digest"])
    return out
