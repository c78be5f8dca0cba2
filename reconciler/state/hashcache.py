"""File and folder digests, cached in the state database by the file's stat key, so an unchanged 1 GB
model is read once. A client of reconciler.state.statcache: a digest is kept only when the stat can
vouch for the content (a file changed within the racy window of being hashed is hashed again next time),
and with the stat caches off nothing is looked up or kept.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from backends.sdk import pathpolicy
from reconciler.state import statcache
from reconciler.state.db import Database
from reconciler.state.digest import sha256

StatKey = Callable[[os.stat_result], statcache.Stat]


class FileHasher:
    """Digests of the files specs name. With `root`, every member of a hashed folder must resolve inside
    it and be a regular file (backends.sdk.pathpolicy): a link to `/dev/zero` or outside is refused, unread."""

    def __init__(self, db: Database, root: Path | None = None) -> None:
        self.db = db
        self.root = root
        self.bytes_read = 0
        self._pending: list[tuple[str, statcache.Stat, str]] = []
        self._memo: dict[str, str] = {}
        self._resolved_text: dict[Path, str] = {}
        self.resolved: dict[str, Path] = {}
        """Spec paths already resolved and confined during this run (many specs share data folders)."""
        self.touched: set[str] | None = None
        """While a set: every file, folder and store object asked for (reconciler.engine.settled)."""

    def digest(self, path: Path) -> str:
        """sha256 of a file, or of a folder's sorted (relative path, file digest) list."""
        if self.touched is not None:
            self.touched.add(str(path))
        return self.tree(path) if path.is_dir() else self.file(path)

    def file(self, path: Path) -> str:
        return self._file(self._real(path), None)

    def _real(self, path: Path) -> str:
        """`path` resolved, once per run like its digest (`_memo`): many specs name one model."""
        real = self._resolved_text.get(path)
        if real is None:
            real = self._resolved_text[path] = str(path.resolve())
        return real

    def stored(self, path: Path) -> str:
        """Digest of a store object: `path` is already real (the store is never a symlink, checked
        when the workspace opens), so it is not resolved again; cached by its linked_key (links into
        work folders move its ctime). FileNotFoundError when absent."""
        if self.touched is not None:
            self.touched.add(str(path))
        os.stat(path)
        return self._file(str(path), None, statcache.linked_key)

    def _file(
        self, key: str, cached: tuple[statcache.Stat, str] | None, stat_key: StatKey = statcache.key
    ) -> str:
        """Digest of the file at the absolute path `key`; `cached` is its cache row when prefetched."""
        if key in self._memo:
            return self._memo[key]
        st = pathpolicy.require_regular(Path(key))
        stat = stat_key(st)
        if cached is None and statcache.enabled():
            cached = self.db.cached_hash(key)
        if cached is not None and cached[0] == stat:
            digest = cached[1]
        else:
            started = time.time_ns()
            digest = self._hash(key, st)
            if statcache.trusted(stat, started):
                self._pending.append((key, stat, digest))
        self._memo[key] = digest
        return digest

    def tree(self, path: Path) -> str:
        """One query for the folder's cached rows, then a stat per file: no file is read if unchanged."""
        base = self._real(path)
        if base + os.sep in self._memo:
            return self._memo[base + os.sep]
        rows = self.db.cached_hashes_under(base + os.sep) if statcache.enabled() else {}
        files = _walk(base)
        confined = self.root is None or pathpolicy.inside(Path(base), pathpolicy.resolve(self.root))
        listing = hashlib.sha256()
        for full, link in sorted(files):
            rel = os.path.relpath(full, base).replace(os.sep, "/")
            if link or not confined:  # base is resolved: only a symlink can lead elsewhere
                assert self.root is not None
                pathpolicy.confine(Path(full), self.root, f"{path.name}/{rel}")
            listing.update(f"{rel}\0{self._file(full, rows.get(full))}\n".encode())
        self._memo[base + os.sep] = listing.hexdigest()
        return self._memo[base + os.sep]

    def known(self, path: str) -> str | None:
        """The digest this run computed or looked up for the file at `path` (links followed), if any."""
        return self._memo.get(os.path.realpath(path))

    def forget(self, path: Path) -> None:
        """Drops what this run and the cache know of `path` (its content is known to have changed)."""
        key = str(path.resolve())
        self._resolved_text.pop(path, None)
        self._memo.pop(key, None)
        self._pending = [row for row in self._pending if row[0] != key]
        self.db.forget_hash(key)

    @property
    def pending(self) -> bool:
        """Whether digests computed in this run still wait to be written to the cache."""
        return bool(self._pending)

    def flush(self) -> None:
        self.db.put_hashes(self._pending)
        self._pending = []

    def _hash(self, path: str, st: os.stat_result) -> str:
        digest, read = sha256(path, st)  # shared with validation's pin check: one read per version
        self.bytes_read += read
        return digest


def _walk(base: str) -> list[tuple[str, bool]]:
    """(path, is a symlink) of every non-folder under `base`, from the directory entries alone (the
    kernel's d_type: no stat); symlinked folders are not followed, as os.walk does not."""
    out: list[tuple[str, bool]] = []
    pending = [base]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif not (entry.is_symlink() and os.path.isdir(entry.path)):
                    out.append((entry.path, entry.is_symlink()))
    return out
