"""Watch-mode latency: from a file event to the start of planning, for several debounce windows.

Prepares a temp git repository with the real digits model and one spec, runs the in-process Watcher
(real watchdog observer, real files; the apply runner is replaced by one that does nothing, so only
the watch path is timed), saves the spec N times, and prints per debounce window the medians of:
- write -> event: from the `write()` call to watchdog delivering the first event (kernel + observer);
- event -> plan: from the last event of the burst to planning starting (the debounce window + loop overhead);
- write -> plan: the whole latency a user sees before anything happens.
The configured window is printed beside them for scale. Printed, never asserted.
Run: python bench/watch.py [--saves 20] [--windows 0,50,300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.watch import Watcher, WatchOptions  # noqa: E402
from reconciler.watch.runner import JobResult  # noqa: E402
from tests.conftest import DIGITS_SPEC, copy_digits, git  # noqa: E402


class _NoJob:
    def __init__(self, spec_file: Path) -> None:
        self.spec_file = spec_file

    def poll(self) -> JobResult:
        return JobResult(0, None, "")

    def cancel(self) -> None:
        pass


class NoRunner:
    """Starts nothing: the bench times the path from the file system to the planner only."""

    def start(self, spec_file: Path) -> _NoJob:
        return _NoJob(spec_file)


def _measure(repo: Path, window_s: float, saves: int) -> dict[str, list[float]]:
    plans: list[tuple[float, Any]] = []
    seen = threading.Event()

    def listener(event: str, data: dict[str, Any]) -> None:
        if event == "plan" and data.get("batch") is not None:
            plans.append((time.monotonic(), data["batch"]))
            seen.set()

    options = WatchOptions(debounce_s=window_s, semantic=False, retry_base_s=3600)
    watcher = Watcher(repo, [repo / "specs"], runner=NoRunner(), options=options, listener=listener)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    while not any(event == "watching" for _, event, _ in list(watcher.events)):
        time.sleep(0.01)
    time.sleep(0.3)
    spec = repo / "specs" / "digits.yaml"
    original = spec.read_text()
    out: dict[str, list[float]] = {"write -> event": [], "event -> plan": [], "write -> plan": []}
    for i in range(saves):
        seen.clear()
        text = original + f"# save {window_s} {i}\n"  # a real save; the plan finds nothing to rebuild
        written_at = time.monotonic()
        spec.write_text(text)
        if not seen.wait(10):
            print(f"  save {i}: no plan within 10 s", file=sys.stderr)
            continue
        planned, batch = plans[-1]
        out["write -> event"].append(batch.first_event - written_at)
        out["event -> plan"].append(planned - batch.last_event)
        out["write -> plan"].append(planned - written_at)
        time.sleep(window_s + 0.1)  # let the watcher settle before the next save
    stop.set()
    thread.join(timeout=30)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--windows", default="0,50,300", help="debounce windows in ms, comma separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npuctl-bench-watch-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "specs").mkdir()
        copy_digits(repo, eval_samples=10, calib_samples=10)
        (repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
        print(
            f"{args.saves} saves per window; medians in ms (write -> plan = what a user waits before planning)"
        )
        print(f"{'debounce window':>16} {'write -> event':>15} {'event -> plan':>14} {'write -> plan':>14}")
        for window_ms in (int(w) for w in args.windows.split(",")):
            result = _measure(repo, window_ms / 1000, args.saves)
            medians = [statistics.median(v) * 1000 if v else float("nan") for v in result.values()]
            print(f"{window_ms:>13} ms {medians[0]:>12.1f} ms {medians[1]:>11.1f} ms {medians[2]:>11.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
