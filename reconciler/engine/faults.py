"""Infrastructure faults: the disk is full, a folder is read-only, permission is denied.

They are nobody's spec error: a stage they hit fails with one line naming the path and the cause,
is not retried at once (a full disk does not empty itself in a second), and is not remembered as a
terminal failure, so the next run on a healthy disk builds normally. A fault in the state database
fails the spec it happened in, named the same way; the other specs carry on.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

from backends.sdk.errors import BackendError

INFRA_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}
)


class InfrastructureError(BackendError):
    """The machine, not the spec: one line naming the path."""


def is_infrastructure(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and exc.errno in INFRA_ERRNOS) or isinstance(exc, sqlite3.Error)


FULL_BELOW_BYTES = 1 << 20


def full_disk(path: Path) -> Path | None:
    """`path` when the file system holding it has (almost) no space left: toolchains report a full
    disk in their own words (OpenVINO: `basic_ios::clear: iostream error`)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return path if usage.free < FULL_BELOW_BYTES else None


def describe(exc: BaseException, database: Path | None = None, near: tuple[Path, ...] = ()) -> str:
    """`<path>: <cause>` for an OSError or an SQLite error (which names no path: the database's). A
    write that failed on a full disk after its file was opened names no path either: the first of
    `near` (the files and folders the failing step writes) whose file system is full is named."""
    if isinstance(exc, sqlite3.Error):
        return f"{database or 'state database'}: {exc}"
    if isinstance(exc, OSError):
        full = next((p for p in near if full_disk(p) is not None), None)
        where = exc.filename if exc.filename is not None else (str(full) if full else "(no path)")
        cause = exc.strerror or str(exc)
        return f"{where}: {cause}"
    return f"{type(exc).__name__}: {exc}"
