"""watchdog observers on the folders holding a watch set's inputs, re-synced whenever specs change.

Only content changes count. watchdog also reports files being opened, closed without writing, and
metadata changes (inotify IN_ATTRIB, which reading a file triggers when it updates its access time;
older watchdog versions report it as "modified"). apply reads every input, so counting those would
make each build cancel itself. A file event therefore counts only when the file's (inode, size,
mtime_ns) differs from the last one seen, folders' own "modified" events are ignored (every real change
inside also has a file event), and events under `.npuctl/` (store, database) are ignored.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler

IGNORED_EVENTS = frozenset({"opened", "closed_no_write", "attrib"})
CONTENT_EVENTS = frozenset({"modified", "closed"})

Signature = tuple[int, int, int]


def _nearest_existing(path: Path) -> Path:
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path


def _signature(path: str) -> Signature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class _Handler(FileSystemEventHandler):
    """Forwards the path(s) of every content change to `sink`."""

    def __init__(self, sink: Callable[[Path], None], ignore_under: Path) -> None:
        super().__init__()
        self.sink = sink
        self.ignore_under = ignore_under
        self.seen: dict[str, Signature | None] = {}
        self.lock = threading.Lock()

    def remember(self, folder: Path, recursive: bool) -> None:
        """Record the signature of every file under a newly watched folder (the baseline)."""
        found: dict[str, Signature | None] = {}
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in filenames:
                full = os.path.join(dirpath, name)
                found[full] = _signature(full)
            if not recursive:
                dirnames.clear()
        with self.lock:
            for path, signature in found.items():
                self.seen.setdefault(path, signature)

    def _changed(self, path: str) -> bool:
        signature = _signature(path)
        with self.lock:
            previous = self.seen.get(path, ())
            self.seen[path] = signature
        return signature is None or previous != signature

    def dispatch(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind in IGNORED_EVENTS or (event.is_directory and kind == "modified"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if not raw:
                continue
            path = os.fsdecode(raw)
            if path == str(self.ignore_under) or path.startswith(str(self.ignore_under) + os.sep):
                continue
            if kind in CONTENT_EVENTS and not self._changed(path):
                continue
            if kind in ("created", "moved"):
                self._changed(path)
            self.sink(Path(path))


class FolderWatcher:
    """One watchdog observer; `sync(folders)` schedules and unschedules folders to match."""

    def __init__(self, sink: Callable[[Path], None], ignore_under: Path) -> None:
        from watchdog.observers import Observer

        self.observer = Observer()
        self.handler = _Handler(sink, ignore_under)
        self.watches: dict[tuple[Path, bool], tuple[Any, int]] = {}
        """(folder, recursive) -> (watchdog watch, inode when scheduled)"""

    def start(self) -> None:
        self.observer.start()

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=5)

    def sync(self, folders: dict[Path, bool]) -> None:
        """Watch exactly these folders (a missing one through its nearest existing ancestor)."""
        wanted: dict[tuple[Path, bool], int] = {}
        for folder, recursive in folders.items():
            existing = _nearest_existing(folder)
            key = (existing, recursive and existing == folder)
            try:
                wanted[key] = existing.stat().st_ino
            except OSError:
                continue
        for key, (watch, inode) in list(self.watches.items()):
            if wanted.get(key) != inode:
                del self.watches[key]
                with contextlib.suppress(KeyError, OSError):  # already gone with its folder
                    self.observer.unschedule(watch)
        for key, inode in wanted.items():
            if key not in self.watches:
                folder, recursive = key
                try:
                    watch = self.observer.schedule(self.handler, str(folder), recursive=recursive)
                except OSError:
                    continue
                self.watches[key] = (watch, inode)
                self.handler.remember(folder, recursive)
