"""A cache file written whole or not at all: temp file and rename, so a reader never sees half of one,
and best effort, so a read-only or full repository just goes without the cache. Read back only if it
is a regular file of bounded size: `.npuctl` sits in a checkout, whose files nothing vouches for."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy

MAX_BYTES = 256 << 20
"""A cache file larger than this is not read (1000 specs write ~0.6 MB of replay, ~2 MB of settled
cache); the run goes without it and rewrites it."""


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
