"""File and folder digests, cached by (inode, size, mtime_ns) so an unchanged 1 GB model is read once.

A file modified within RACY_NS of being hashed is not cached: a second write inside the same
timestamp tick would leave inode, size and mtime unchanged, and the cache would lie (git's "racy
clean" problem). Such files are simply hashed again next time.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from backends import pathpolicy
from reconciler.state.db import Database
from reconciler.state.store import CHUNK

RACY_NS = 100_000_000
"""Larger than the coarse kernel clock tick that stamps mtimes (4-10 ms), with margin."""


class FileHasher:
    """Digests of the files specs name. With `root`, every member of a hashed folder must resolve inside
    it and be a regular file (backends.pathpolicy): a link to `/dev/zero` or outside is refused, unread."""

    def __init__(self, db: Database, root: Path | None = None) -> None:
        self.db = db
        self.root = root
        self.bytes_read = 0
        self._pending: list[tuple[str, int, int, int, str]] = []
        self._memo: dict[str, str] = {}
        self.resolved: dict[str, Path] = {}
        """Spec paths already resolved and confined during this run (many specs share data folders)."""

    def digest(self, path: Path) -> str:
        """sha256 of a file, or of a folder's sorted (relative path, file digest) list."""
        return self.tree(path) if path.is_dir() else self.file(path)

    def file(self, path: Path) -> str:
        return self._file(str(path.resolve()), None)

    def _file(self, key: str, cached: tuple[int, int, int, str] | None) -> str:
        """Digest of the file at the absolute path `key`; `cached` is its cache row when prefetched."""
        if key in self._memo:
            return self._memo[key]
        st = pathpolicy.require_regular(Path(key))
        if cached is None:
            cached = self.db.cached_hash(key)
        if cached is not None and cached[:3] == (st.st_ino, st.st_size, st.st_mtime_ns):
            digest = cached[3]
        else:
            started = time.time_ns()
            digest = self._hash(key)
            if started - st.st_mtime_ns > RACY_NS:
                self._pending.append((key, st.st_ino, st.st_size, st.st_mtime_ns, digest))
        self._memo[key] = digest
        return digest

    def tree(self, path: Path) -> str:
        """One query for the folder's cached rows, then a stat per file: no file is read if unchanged."""
        base = str(path.resolve())
        if base + os.sep in self._memo:
            return self._memo[base + os.sep]
        rows = self.db.cached_hashes_under(base + os.sep)
        files = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            files += [os.path.join(dirpath, name) for name in filenames]
        listing = hashlib.sha256()
        for full in sorted(files):
            rel = os.path.relpath(full, base).replace(os.sep, "/")
            if self.root is not None:
                pathpolicy.confine(Path(full), self.root, f"{path.name}/{rel}")
            listing.update(f"{rel}\0{self._file(full, rows.get(full))}\n".encode())
        self._memo[base + os.sep] = listing.hexdigest()
        return self._memo[base + os.sep]

    def forget(self, path: Path) -> None:
        """Drops what this run and the cache know of `path` (its content is known to have changed)."""
        key = str(path.resolve())
        self._memo.pop(key, None)
        self._pending = [row for row in self._pending if row[0] != key]
        self.db.forget_hash(key)

    def flush(self) -> None:
        self.db.put_hashes(self._pending)
        self._pending = []

    def _hash(self, path: str) -> str:
        digest = hashlib.sha256()
        with pathpolicy.open_regular(path) as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
                self.bytes_read += len(chunk)
        return digest.hexdigest()
