"""The one path policy: what npuctl may read or write inside an untrusted repository.

Every reader goes through here: spec discovery, `extends`, the model, data folders and each of their
members, the file-hash cache, lock files and `.npuctl`. The rules:

- a path written in a spec is relative text: no NUL byte, not absolute, no `~`;
- symlinks are resolved, and the result must stay inside the repository root;
- only regular files are read: a FIFO, a device (`/dev/zero`), a socket or a folder where a file is
  expected is refused before it is opened, and files are opened non-blocking, so that nothing can hang;
- `.npuctl` and the state entries in it are never symlinks (state must not move outside).

Refusals are `PathRefused` with a one-line reason; callers add the file, line, column and field.
Domain-free (no spec, no stage): the engine and the backends share it.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


class PathRefused(ValueError):
    """A path the policy does not allow; the message is one line, without the field."""


def check_text(value: str) -> None:
    """A path as written in a spec: relative, printable text."""
    if "\0" in value:
        raise PathRefused(f"{value!r} contains a NUL byte")
    if not value.strip():
        raise PathRefused("empty path")
    if os.path.isabs(value) or value.startswith("~"):
        raise PathRefused(f"{value!r} is absolute: write it relative to the spec file")


def inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


_RESOLVED: dict[Path, Path] | None = None
"""While `remembered` is active: each path resolved so far (an unresolvable one is not kept)."""


@contextmanager
def remembered() -> Iterator[None]:
    """Within the block, `resolve` follows the symlinks of a path once: a pass over a thousand specs
    that name one data folder walks its path once, not a thousand times. A pass is one moment: a
    link retargeted during it may be seen either way, as it could be without the memo."""
    global _RESOLVED
    outer, _RESOLVED = _RESOLVED, {} if _RESOLVED is None else _RESOLVED
    try:
        yield
    finally:
        _RESOLVED = outer


def resolve(path: Path) -> Path:
    """`path` with every symlink followed; a loop or an unreadable link is refused."""
    memo = _RESOLVED
    if memo is not None:
        known = memo.get(path)
        if known is None:
            known = memo[path] = _resolve(path)
        return known
    return _resolve(path)


def _resolve(path: Path) -> Path:
    try:
        resolved = path.resolve()
        os.lstat(resolved)
    except FileNotFoundError:
        return resolved  # absent: the caller says "not found" in its own words
    except (RuntimeError, OSError) as exc:  # RuntimeError: symlink loop (Python < 3.13)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PathRefused(f"{_short(str(path))}: cannot resolve ({reason})") from None
    return resolved


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "..." + text[-limit // 2 :]


def confine(path: Path, root: Path, shown: str | None = None) -> Path:
    """`path` resolved; refused when it lands outside `root` (itself resolved)."""
    resolved = resolve(path)
    real_root = resolve(root)
    if not inside(resolved, real_root):
        raise PathRefused(
            f"{_short(shown or str(path))!r} resolves to {_short(str(resolved))}, outside the repository {real_root}"
        )
    return resolved


def describe_mode(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def require_regular(path: Path) -> os.stat_result:
    """The stat of `path` (followed), refused unless it is a regular file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise PathRefused(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(f"{path} is {describe_mode(st.st_mode)}: only regular files are read")
    return st


def regular_file(path: Path, root: Path, shown: str | None = None) -> Path:
    """`path` resolved inside `root` and a regular file."""
    resolved = confine(path, root, shown)
    require_regular(resolved)
    return resolved


def folder(path: Path, root: Path, shown: str | None = None) -> Path:
    """`path` resolved inside `root` and a folder."""
    resolved = confine(path, root, shown)
    if not resolved.is_dir():
        raise PathRefused(f"{resolved} is not a folder")
    return resolved


def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for reading only if it is a regular file, checked on the open descriptor (no race,
    and a FIFO is never waited on)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PathRefused(f"{path}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PathRefused(f"{path} is {describe_mode(st.st_mode)}: only regular files are read")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def members(base: Path, root: Path | None, suffixes: Iterable[str] | None = None) -> list[Path]:
    """The files directly in the folder `base` (hidden ones skipped, optionally only these suffixes),
    sorted by name; a member that escapes `root` or is not a regular file is refused, never skipped.
    `root` None: the caller's engine confined the folder's members already (backends know no repo).

    The folder is resolved once: a member that is not a symlink lies where its folder does, so only
    symlinks are resolved one by one (a folder of N files costs N stats, not N path walks). A folder
    without symlinks is listed once per process while its own stat is unchanged (a member created,
    removed, renamed or replaced changes it): many specs sharing one data folder cost one listing."""
    wanted = tuple(s.lower() for s in suffixes) if suffixes is not None else None
    real_base = resolve(base)
    real_base_inside = root is None or inside(real_base, resolve(root))
    memo_key = (str(base), str(real_base), real_base_inside, wanted)
    folder_stat = _folder_stat(real_base)
    known = _LISTED.get(memo_key)
    if known is not None and folder_stat is not None and known[0] == folder_stat:
        return list(known[1])
    out = []
    plain = True
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if wanted is not None and not entry.name.lower().endswith(wanted):
            continue
        if entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        plain = plain and not entry.is_symlink()
        if root is not None and (entry.is_symlink() or not real_base_inside):
            confine(path, root, f"{base.name}/{entry.name}")
        require_regular(path)
        out.append(path)
    settled = folder_stat is not None and time.time_ns() - max(folder_stat[2:]) > _SETTLED_NS
    if plain and settled and folder_stat is not None and folder_stat == _folder_stat(real_base):
        _LISTED[memo_key] = (folder_stat, tuple(out))
    return out


_LISTED: dict[tuple[object, ...], tuple[tuple[int, ...], tuple[Path, ...]]] = {}
_SETTLED_NS = 2 * 10**9
"""A folder changed in the last 2 s is not remembered: a second change within the file system's
timestamp tick would leave its stat unchanged."""


def _folder_stat(folder: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)


STATE_ENTRIES = (
    "store",
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "logs",
    "locks",
    "tmp",
    "cache",
    "corrupt",
)


def check_state_dir(state_dir: Path) -> None:
    """`.npuctl` and its entries are real folders and files of this repository, never symlinks
    (a committed `.npuctl -> /elsewhere` would move the store and the database outside)."""
    for path in (state_dir, *(state_dir / name for name in STATE_ENTRIES)):
        if path.is_symlink():
            raise PathRefused(f"{path} is a symlink: npuctl keeps its state only in a real folder")
        if path == state_dir and path.exists() and not path.is_dir():
            raise PathRefused(f"{path} is {describe_mode(os.lstat(path).st_mode)}, not a folder")
