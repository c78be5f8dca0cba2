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
DEFAULT_TIMEOUT_S = 3600.0
"""How long a lock is waited for (NPUCTL_LOCK_TIMEOUT_S overrides): a holder that is alive but stuck
(stopped with SIGSTOP, hung on a dead mount) must not block every later run for ever."""


class LockTimeout(TimeoutError):
    """The lock was not free within the timeout; the message names the holder, its pid and age."""


def timeout_s() -> float:
    try:
        value = float(os.environ.get("NPUCTL_LOCK_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value >= 0 else DEFAULT_TIMEOUT_S


def _process_state(pid: int) -> str:
    """ " (stopped)" for a process stopped by a signal, " (not running)" for none, else ""."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return " (not running)"
        except PermissionError:
            return ""
        return ""
    return " (stopped)" if fields and fields[0] in ("T", "t") else ""


def _holder(owner_file: Path) -> str:
    try:
        info = json.loads(owner_file.read_text())
        since = float(info["since"])
        state = _process_state(int(info["pid"])) if info.get("host") == socket.gethostname() else ""
        started = time.strftime("%H:%M:%S", time.localtime(since))
        age = max(0.0, time.time() - since)
        return f"pid {info['pid']}{state} on {info['host']} since {started} ({age:.0f} s)"
    except (OSError, ValueError, KeyError, TypeError):
        return "another npuctl process"


@contextmanager
def hold(lock_dir: Path, name: str, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the named lock; when it is taken, call on_wait(holder description) once and wait."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_dir / f"{name}.lock"))
    owner_file = lock_dir / f"{name}.owner"
    limit = timeout_s()
    try:
        lock.acquire(timeout=min(NOTICE_AFTER_S, limit))
    except Timeout:
        if on_wait is not None:
            on_wait(_holder(owner_file))
        try:
            lock.acquire(timeout=max(0.0, limit - NOTICE_AFTER_S))
        except Timeout:
            raise LockTimeout(
                f"lock {name} not free after {limit:g} s: held by {_holder(owner_file)} "
                f"({lock_dir / (name + '.lock')}; NPUCTL_LOCK_TIMEOUT_S sets the wait)"
            ) from None
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
