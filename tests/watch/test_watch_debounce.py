"""The debouncer on its own: bursts become one batch, separate bursts stay separate."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from reconciler.watch.debounce import Debouncer


def _collect(debouncer: Debouncer, seconds: float) -> list[frozenset[Path]]:
    stop = threading.Event()
    batches = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = debouncer.wait(stop, 0.05)
        if batch is not None:
            batches.append(batch.paths)
    return batches


def test_a_burst_is_one_batch_with_every_path() -> None:
    debouncer = Debouncer(quiet_s=0.15)
    for i in range(5):
        debouncer.add(Path(f"/x/{i % 2}"))
        time.sleep(0.03)
    assert _collect(debouncer, 0.6) == [frozenset({Path("/x/0"), Path("/x/1")})]


def test_quiet_gap_longer_than_the_window_gives_two_batches() -> None:
    debouncer = Debouncer(quiet_s=0.1)
    stop = threading.Event()
    debouncer.add(Path("/a"))
    first = debouncer.wait(stop, 1.0)
    debouncer.add(Path("/b"))
    second = debouncer.wait(stop, 1.0)
    assert first is not None and first.paths == {Path("/a")}
    assert second is not None and second.paths == {Path("/b")}


def test_batch_waits_for_the_quiet_window_after_the_last_event() -> None:
    debouncer = Debouncer(quiet_s=0.2)
    stop = threading.Event()
    debouncer.add(Path("/a"))
    time.sleep(0.1)
    debouncer.add(Path("/a"))
    batch = debouncer.wait(stop, 2.0)
    assert batch is not None and batch.events == 2
    assert time.monotonic() - batch.last_event >= 0.2 - 0.01


def test_continuous_writes_are_flushed_after_max_wait() -> None:
    debouncer = Debouncer(quiet_s=0.2, max_wait_s=0.3)
    stop = threading.Event()
    done = threading.Event()

    def writer() -> None:
        while not done.is_set():
            debouncer.add(Path("/busy"))
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        batch = debouncer.wait(stop, 3.0)
    finally:
        done.set()
        thread.join()
    assert batch is not None, "a file written without pause must still be handled"
    assert batch.last_event - batch.first_event < 0.5


def test_wait_returns_none_on_timeout_and_on_stop() -> None:
    debouncer = Debouncer(quiet_s=0.1)
    stop = threading.Event()
    assert debouncer.wait(stop, 0.05) is None
    stop.set()
    debouncer.add(Path("/a"))
    assert debouncer.wait(stop, 1.0) is None
