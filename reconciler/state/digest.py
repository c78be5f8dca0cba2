"""The one streaming sha256 of a file, shared by every consumer in the process.

The pin check of validation, the engine's file-hash cache and the check that a stage's inputs did not
change while it ran all ask for the same digest; a large model must be read for it once. Digests are
remembered by (path, inode, size, mtime_ns, ctime_ns), and only for files last modified more than
RACY_NS before hashing began: a second write inside the same timestamp tick could keep the stat.
"""

from __future__ import annotations

import hashlib
import os
import time

from backends.sdk import pathpolicy

CHUNK = 1 << 20
RACY_NS = 100_000_000
"""Larger than the coarse kernel clock tick that stamps mtimes (4-10 ms), with margin."""
Stat = tuple[int, int, int, int]

_known: dict[tuple[str, Stat], str] = {}


def stat_key(st: os.stat_result) -> Stat:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def sha256(path: str, st: os.stat_result) -> tuple[str, int]:
    """(hex digest, bytes read now) of the regular file at `path`, whose stat is `st`."""
    key = (path, stat_key(st))
    if key in _known:
        return _known[key], 0
    started = time.time_ns()
    digest = hashlib.sha256()
    read = 0
    with pathpolicy.open_regular(path) as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            read += len(chunk)
    if started - st.st_mtime_ns > RACY_NS:
        _known[key] = digest.hexdigest()
    return digest.hexdigest(), read
