"""The stat cache: when a file's stat may stand for its content, and where that judgement is kept.

Every cache that skips work because its inputs are unchanged (the validated specs, the ONNX summaries,
the file digests, the settled results and the no-op replay; docs/caches.md) keeps, with each entry, the
stat of every file the entry was derived from, and uses the entry only while each file still has it.
Three rules make that sound, and they are defined here only:

- The key (`key`, `stat_of`): inode, device, size, mtime_ns and ctime_ns. Inode and device catch a
  file replaced by another (a rename into place, a checkout); size and mtime catch an ordinary write;
  ctime catches an edit in place that keeps size and mtime (a tool that restores the mtime), since the
  kernel sets it on every change and a program cannot. Store objects, which npuctl hardlinks as a
  matter of course, leave ctime out (`linked_key`).
- The racy rule (`trusted`): a stat vouches for content only when the file last changed (mtime or
  ctime, whichever is later) at least one timestamp tick before the moment its content was read.
  File systems stamp times from a clock that advances in ticks, so a second write within the tick of
  the first keeps every field of the stat (git's "racy clean" problem); a file that changed that
  recently is used but not remembered, and the next run looks at it again.
- The witness (`witness`, `holds`): what a cache entry keeps of one file, its stat, and, when the stat
  is racy, the sha256 of the content the entry was derived from. The next run trusts the stat of a
  witness without a digest; one with a digest it trusts only after hashing the file again (git's
  "racily clean" entries). So a file written just before the entry (the lock file an apply has just
  written, the objects it stored) costs the next run one read of that file, not the whole cache.
- The file (`read_json`, `write`): a cache file is written whole or not at all (a temp file renamed
  into place), best effort (a read-only or full repository goes without the cache), and read back only
  when it is a regular file of bounded size (`.npuctl` sits in a checkout nothing vouches for).

`NPUCTL_NO_CACHE=1` turns every stat cache off: `enabled()` is False, `folder` offers no place for cache
files, `trusted` trusts no stat, so no entry is read, remembered or written and every answer is derived
in full. The build cache (the store, the state database's stage records and the lock files) is not a
stat cache and stays on: answers are the same, only slower.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy

OFF_ENV = "NPUCTL_NO_CACHE"
"""Set to 1 (any value but empty or 0) to turn every stat cache off, for debugging."""

Stat = tuple[int, int, int, int, int]
"""(st_ino, st_dev, st_size, st_mtime_ns, st_ctime_ns): the key, as an in-process memo or the state
database holds it (`key`)."""
Recorded = list[int]
"""The key as a cache file holds it, a JSON list (`stat_of`): compared with what a file read back."""
_MTIME, _CTIME = 3, 4

RACY_NS = 100_000_000
"""The racy window for sub-second stamps: above the coarse kernel clock tick that stamps them (1-10 ms),
with margin."""
WHOLE_SECOND_RACY_NS = 2_000_000_000
"""The racy window for a stamp on a whole second: it comes from a file system that keeps seconds
(ext3, HFS+) or even seconds (FAT), whose tick is up to 2 s."""
_SECOND_NS = 1_000_000_000

MAX_BYTES = 256 << 20
"""A cache file larger than this is not read (1000 specs write ~0.6 MB of replay, ~2 MB of settled
cache); the run goes without it and rewrites it."""


@cache
def enabled() -> bool:
    """Whether the stat caches are on (read once a process: NPUCTL_NO_CACHE)."""
    return os.environ.get(OFF_ENV, "") in ("", "0")


def key(st: os.stat_result) -> Stat:
    """The stat key of a file from its stat."""
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def linked_key(st: os.stat_result) -> Stat:
    """The stat key of a store object: `key` with ctime left out (0), so the racy rule reads its mtime
    alone. Store objects are written once, read-only, and hardlinked into the work folder of every stage
    that reads them: each link and unlink moves their ctime and nothing else, and a key with it would
    send every object a build linked to be read again. An edit in place of a read-only object named by
    its digest is corruption, which fsck finds by reading."""
    return (*key(st)[:4], 0)  # ctime is the last field


def stat_of(path: Path | str) -> Recorded | None:
    """The stat key of the file at `path` (links followed) as a cache file records it, a JSON list;
    None when it cannot be stat'd."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in a path a spec wrote
        return None
    return [*key(st)]


def trusted(stat: Sequence[int] | None, at_ns: int) -> bool:
    """Whether an entry that holds on `stat` may be remembered: the caches are on and the file last
    changed at least one timestamp tick before `at_ns`, the moment (time.time_ns()) before its content
    was read; for a run that reads many files, before the run began."""
    if stat is None or not enabled():
        return False
    changed = max(stat[_MTIME], stat[_CTIME])
    window = RACY_NS if changed % _SECOND_NS else WHOLE_SECOND_RACY_NS
    return changed < at_ns - window


Witness = list[Any]
"""[path, stat_of(path)], or [path, stat_of(path), sha256 of its content] when the stat is racy."""

WITNESS_MAX_BYTES = 64 << 20
"""A racy file larger than this is not hashed again to vouch for its content: its entry is not kept."""


def content_digest(path: str) -> str | None:
    """The sha256 of the regular file at `path`, or of the sorted names in the folder at `path` (what
    a folder holds is its listing); None when it cannot be read or the file is too large."""
    try:
        if os.path.isdir(path):
            return hashlib.sha256("\0".join(sorted(os.listdir(path))).encode()).hexdigest()
        with pathpolicy.open_regular(path) as fh:
            if os.fstat(fh.fileno()).st_size > WITNESS_MAX_BYTES:
                return None
            digest = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
            return digest.hexdigest()
    except (OSError, ValueError, pathpolicy.PathRefused):
        return None


def witness(
    path: str, stat: Recorded | None, at_ns: int, known: Callable[[str], str | None]
) -> Witness | None:
    """What an entry derived from the file at `path` after `at_ns` keeps of it: its stat when trusted;
    else its stat and `known(path)`, the digest of the content the entry was derived from (None: not
    known, so the entry is not kept). A missing file (stat None) is a witness of its absence."""
    if stat is None or trusted(stat, at_ns):
        return [path, stat]
    digest = known(path) if enabled() else None
    return None if digest is None else [path, stat, digest]


def holds(seen: Sequence[Any], stat: Recorded | None) -> bool:
    """Whether the file of a witness, whose stat is now `stat`, is unchanged: the same stat, and for a
    racy one the same content."""
    if stat != seen[1]:
        return False
    return len(seen) < 3 or content_digest(seen[0]) == seen[2]


def refreshed(seen: Sequence[Any], stat: Recorded | None, at_ns: int) -> bool:
    """Whether a racy witness that `holds` may become a plain one, `[path, stat]`: its content was read
    again after `at_ns` and its stat is trusted at `at_ns`, so a later write would change the stat
    (git refreshing a racily clean index entry)."""
    return len(seen) > 2 and trusted(stat, at_ns)


REWRITE_SHARE = 8
"""A cache file is rewritten only for its refreshed witnesses when they would make every later run
read at least 1/REWRITE_SHARE of its size again (`worth_rewriting`): a thousand lock files an apply
wrote, yes; the one lock an edit's apply rewrote, not (the rewrite would cost more than it saves)."""


def worth_rewriting(refreshed_bytes: int, file_bytes: int) -> bool:
    return refreshed_bytes > 0 and refreshed_bytes * REWRITE_SHARE >= file_bytes


def folder(state_dir: Path) -> Path | None:
    """The folder of the cache files (`<state_dir>/cache`); None when the caches are off or the state
    folder is refused (a committed `.npuctl` symlink is never read or written through)."""
    if not enabled():
        return None
    try:
        pathpolicy.check_state_dir(state_dir)
    except pathpolicy.PathRefused:
        return None
    return state_dir / "cache"


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when it is missing, not a regular file, too large or not JSON."""
    try:
        with pathpolicy.open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BYTES:
                return None
            text = fh.read(size + 1)  # one byte more: a file that grew since the fstat is refused
        return None if len(text) > size else json.loads(text)
    except (OSError, ValueError, pathpolicy.PathRefused):
        return None


def write(target: Path, text: str, prefix: str = ".tmp-") -> bool:
    """Whether `text` is now the content of `target`."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True
