"""Inter-process locks: one per spec and one per stage key, so two reconcilers on one repository
(watch mode plus a CI job) never build the same stage at once. The second waits, saying who holds it.

fcntl locks (through filelock) are released by the kernel when a holder dies, even by kill -9.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

NOTICE_AFTER_S = 1.0


def _holder(owner_file: Path) -> str:
    try:
        info = json.loads(owner_file.read_text())
        return f"pid {info['pid']} on {info['host']} since {time.strftime('%H:%M:%S', time.localtime(info['since']))}"
    except (OSError, ValueError, KeyError):
        return "another npuctl process"


@contextmanager
def hold(lock_dir: Path, name: str, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the named lock; when it is taken, call on_wait(holder description) once and wait."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_dir / f"{name}.lock"))
    owner_file = lock_dir / f"{name}.owner"
    try:
        lock.acquire(timeout=NOTICE_AFTER_S)
    except Timeout:
        if on_wait is not None:
            on_wait(_holder(owner_file))
        lock.acquire()
    try:
        owner_file.write_text(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        )
        yield
    finally:
        lock.release()


def holder_if_held(lock_dir: Path, name: str) -> str | None:
    """Who holds the named lock right now, or None when it is free."""
    if not (lock_dir / f"{name}.lock").exists():
        return None
    lock = FileLock(str(lock_dir / f"{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return _holder(lock_dir / f"{name}.owner")
    lock.release()
    return None
