"""A cache file written whole or not at all: temp file and rename, so a reader never sees half of one,
and best effort, so a read-only or full repository just goes without the cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
