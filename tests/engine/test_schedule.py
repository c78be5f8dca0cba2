"""Start order and device exclusion of the executors' dispatcher (reconciler.engine.schedule)."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from reconciler.engine.schedule import Placement, dispatch, order


def test_costliest_first_and_a_shared_upstream_built_before_its_sharers() -> None:
    places = [
        Placement(10, "model-a"),
        Placement(500, "model-a"),
        Placement(50, "model-b"),
        Placement(300, "model-c"),
        Placement(400, "model-b"),
    ]
    # each group's costliest member first (by cost), then the members that reuse its stages
    assert order(places) == [1, 4, 3, 2, 0]


def test_two_specs_on_one_device_never_run_at_once_while_others_fill_the_slots() -> None:
    places = [
        Placement(100, "a", device="ssh://board-1"),
        Placement(90, "b", device="ssh://board-1"),
        Placement(80, "c"),
        Placement(70, "d", device="adb://phone"),
        Placement(60, "e"),
    ]
    lock = threading.Lock()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    concurrent = [0, 0]

    def work(index: int) -> int:
        device = places[index].device or f"cpu-{index}"
        with lock:
            running[device] = running.get(device, 0) + 1
            peak[device] = max(peak.get(device, 0), running[device])
            concurrent[0] += 1
            concurrent[1] = max(concurrent[1], concurrent[0])
        time.sleep(0.05)
        with lock:
            running[device] -= 1
            concurrent[0] -= 1
        return index

    with ThreadPoolExecutor(max_workers=3) as pool:

        def submit(index: int, item: Any) -> Future[int]:
            return pool.submit(work, index)

        def wait(handles: list[Future[int]]) -> tuple[Future[int], int]:
            done, _ = futures.wait(handles, return_when=futures.FIRST_COMPLETED)
            handle = next(iter(done))
            return handle, handle.result()

        finished = [i for i, _ in dispatch(list(range(5)), places, 3, submit, wait)]
    assert sorted(finished) == [0, 1, 2, 3, 4]
    assert peak["ssh://board-1"] == 1
    assert concurrent[1] == 3  # the board's second spec waited; the slot went to another spec
    assert finished.index(0) < finished.index(1)
