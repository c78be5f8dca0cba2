"""specs/NAME.lock.json: what was built and measured for a spec, meant to be committed.

Deterministic (sorted keys, no timestamps), so an apply that rebuilt nothing leaves it byte-identical
and a pull-request diff shows exactly what changed.
"""

from __future__ import annotations

import contextlib
import errno
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


class LockUnreadable(ValueError):
    """A lock file that exists but cannot be read as a lock: merge-conflict markers, truncated or
    invalid JSON, not an object, or a format this npuctl does not know. Never read as "no lock": every
    command that needs it stops on it with `FILE:LINE:COL: why`, and nothing rewrites or removes it."""

    def __init__(self, path: Path, line: int, col: int, why: str) -> None:
        super().__init__(f"{path}:{line}:{col}: {why}")
        self.path, self.line, self.col, self.why = path, line, col, why


CONFLICT_MARKERS = ("<<<<<<<", "|||||||", "=======", ">>>>>>>")
"""git's conflict marker lines (7 characters, then a space or the line's end)."""

_FIX = "resolve it (`npuctl lock install-merge-driver` merges lock files), or delete it to rebuild"


def read(path: Path) -> dict[str, Any] | None:
    """The lock file's content; None when there is none. A lock that is present but unreadable raises
    LockUnreadable: it is never taken for an absent one (an apply would overwrite committed evidence).

    A symlink is never followed (a committed `x.lock.json -> /etc/...` reads nothing outside; apply
    replaces the link itself), and only a regular file is read (backends.sdk.pathpolicy)."""
    try:
        if path.is_symlink() or not path.exists():
            return None
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR):
            return None  # no such file can exist (the spec's own name is the error)
        raise LockUnreadable(path, 1, 1, f"cannot read the lock file: {exc.strerror or exc}") from None
    try:
        with pathpolicy.open_regular(path) as fh:
            raw = fh.read(MAX_BYTES + 1)
    except pathpolicy.PathRefused:
        return None
    except OSError as exc:
        raise LockUnreadable(path, 1, 1, f"cannot read the lock file: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise LockUnreadable(path, 1, 1, f"lock file larger than {MAX_BYTES >> 20} MiB")
    return parse(path, raw)


def parse(path: Path, raw: bytes) -> dict[str, Any]:
    """The lock held in `raw` (the bytes of `path`); LockUnreadable, located, when it holds none."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8", "replace")
        line, col = _position(before, len(before))
        raise LockUnreadable(path, line, col, "not UTF-8 text") from None
    for number, line_text in enumerate(text.splitlines(), 1):
        if line_text.startswith(CONFLICT_MARKERS) and line_text[7:8] in ("", " "):
            raise LockUnreadable(path, number, 1, f"git merge-conflict marker {line_text[:7]}: {_FIX}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")  # ran into EOF
        why = "truncated JSON" if cut else f"invalid JSON ({exc.msg})"
        raise LockUnreadable(path, exc.lineno, exc.colno, f"{why}: {_FIX}") from None
    if not isinstance(data, dict):
        raise LockUnreadable(path, 1, 1, f"a lock file holds a JSON object, not {type(data).__name__}")
    version = data.get("format_version", FORMAT_VERSION)
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        line, col = _located(text, '"format_version"')
        raise LockUnreadable(
            path,
            line,
            col,
            f"format_version: {version!r} is not a lock format this npuctl reads (1 to {FORMAT_VERSION}): "
            "written by a newer npuctl? upgrade it",
        )
    return data


def _located(text: str, needle: str) -> tuple[int, int]:
    """(line, column), 1-based, of the first `needle` in `text`; (1, 1) when absent."""
    at = text.find(needle)
    return _position(text, at) if at >= 0 else (1, 1)


def _position(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


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
