"""Content-addressed artifact store: objects named by their sha256, written by temp file + rename.

An object is either complete under its final name or absent, so a kill -9 at any moment leaves
nothing half-written that a later run could mistake for an artifact.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(self, source: Path, digest: str | None = None) -> str:
        """Add a file; returns its digest. The source is consumed (moved when on the same device).
        `digest`: what the caller hashed from these very bytes (a download it verified), so they are
        not read again."""
        digest = digest or sha256_file(source)
        final = self.path(digest)
        if final.is_file():
            source.unlink()
            return digest
        try:
            self._place(source, final)
        except OSError as exc:  # a full or read-only store names the store, not the source
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.root)) from exc
        return digest

    def _place(self, source: Path, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", dir=final.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            try:
                os.replace(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
                source.unlink()
            with tmp.open("rb") as fh:
                os.fsync(fh.fileno())
            tmp.chmod(0o444)
            os.replace(tmp, final)
            fsync_dir(final.parent)
        finally:
            if tmp.exists():
                tmp.unlink()

    def size(self, digest: str) -> int:
        return self.path(digest).stat().st_size

    def digests(self) -> Iterator[str]:
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for obj in sorted(sub.iterdir()):
                if not obj.name.startswith(".tmp-"):
                    yield sub.name + obj.name

    def quarantine(self, digest: str, folder: Path) -> Path | None:
        """Moves a corrupt object out of the store (kept for inspection); None when it was gone."""
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / f"{digest}.{time.time_ns()}"
        try:
            os.replace(self.path(digest), dest)
        except FileNotFoundError:
            return None
        return dest

    def remove(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def stale_temp_files(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob("*/.tmp-*"))

    def verify(self) -> list[str]:
        """Digests whose content no longer matches their name (should always be empty)."""
        return [d for d in self.digests() if sha256_file(self.path(d)) != d]
