"""Debouncing: a burst of file events becomes one batch once the files have been quiet for a while.

An editor's save is often several events (write a temp file, rename it over the original, touch the
folder), and a script may save many times in a row: each burst must trigger one plan, not many. A batch
is ready when no event arrived for `quiet_s`; `max_wait_s` bounds the delay under continuous writes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Batch:
    paths: frozenset[Path]
    first_event: float
    """time.monotonic() of the first event of the burst."""
    last_event: float
    events: int


class Debouncer:
    def __init__(self, quiet_s: float = 0.3, max_wait_s: float | None = None) -> None:
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s if max_wait_s is not None else max(10 * quiet_s, 2.0)
        self._cond = threading.Condition()
        self._paths: set[Path] = set()
        self._first = 0.0
        self._last = 0.0
        self._events = 0

    def add(self, path: Path) -> None:
        """Called from the observer's thread for every relevant event."""
        now = time.monotonic()
        with self._cond:
            if not self._paths:
                self._first = now
            self._paths.add(path)
            self._last = now
            self._events += 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Interrupt a waiting `wait` (on stop)."""
        with self._cond:
            self._cond.notify_all()

    def _due(self) -> float:
        return min(self._last + self.quiet_s, self._first + self.max_wait_s)

    def wait(self, stop: threading.Event, timeout: float) -> Batch | None:
        """The next ready batch, or None after `timeout` seconds (or on stop) without one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not stop.is_set():
                now = time.monotonic()
                if self._paths and now >= self._due():
                    batch = Batch(frozenset(self._paths), self._first, self._last, self._events)
                    self._paths, self._events = set(), 0
                    return batch
                if now >= deadline:
                    return None
                until = min(self._due(), deadline) if self._paths else deadline
                self._cond.wait(until - now)
        return None
