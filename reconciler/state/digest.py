"""The one streaming sha256 of a file, shared by every consumer in the process.

The pin check of validation, the engine's file-hash cache and the check that a stage's inputs did not
change while it ran all ask for the same digest; a large model must be read for it once. Digests are
remembered by path and stat key while the stat can vouch for the content (reconciler.state.statcache).
"""

from __future__ import annotations

import hashlib
import os
import time

from backends.sdk import pathpolicy
from reconciler.state import statcache

CHUNK = 1 << 20

_known: dict[tuple[str, statcache.Stat], str] = {}


def sha256(path: str, st: os.stat_result) -> tuple[str, int]:
    """(hex digest, bytes read now) of the regular file at `path`, whose stat is `st`."""
    key = (path, statcache.key(st))
    if key in _known and statcache.enabled():
        return _known[key], 0
    started = time.time_ns()
    digest = hashlib.sha256()
    read = 0
    with pathpolicy.open_regular(path) as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            read += len(chunk)
    if statcache.trusted(key[1], started):
        _known[key] = digest.hexdigest()
    return digest.hexdigest(), read
