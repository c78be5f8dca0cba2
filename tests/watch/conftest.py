"""Running a Watcher in a thread against a real repository, with real watchdog events."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.watch import Watcher, WatchOptions
from reconciler.watch.runner import Job, Runner, SubprocessRunner
from reconciler.watch.status import Board
from tests.conftest import run_npuctl

FAST = WatchOptions(debounce_s=0.3, retry_base_s=0.2, semantic=True)


class CountingRunner:
    """The real runner, counting the applies it starts."""

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.started: list[Path] = []

    def start(self, spec_file: Path) -> Job:
        self.started.append(spec_file)
        return self.inner.start(spec_file)


class RecordingBoard(Board):
    """Keeps every status change, so a test can wait for one."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[str, str, str]] = []
        self.messages: list[str] = []

    def changed(self, line: Any) -> None:
        self.history.append((line.spec, line.state, line.detail))

    def message(self, text: str, **data: Any) -> None:
        self.messages.append(text)


class Harness:
    def __init__(self, watcher: Watcher, board: RecordingBoard) -> None:
        self.watcher = watcher
        self.board = board
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run(self.stop)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def start(self) -> Harness:
        self.thread.start()
        self.wait_event("watching", timeout=60)
        time.sleep(0.2)  # inotify watches are in place once `watching` is emitted; let them settle
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "watcher did not stop"
        if self.error is not None:
            raise self.error

    def events(self, name: str) -> list[dict[str, Any]]:
        return [data for _, event, data in list(self.watcher.events) if event == name]

    def replans(self) -> list[dict[str, Any]]:
        """Plans triggered by file events (the initial reconcile excluded)."""
        return [data for data in self.events("plan") if data["batch"] is not None]

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.error is not None:
                raise self.error
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}; history: {self.board.history[-8:]}")

    def wait_event(self, name: str, timeout: float = 60, count: int = 1) -> None:
        self.wait(lambda: len(self.events(name)) >= count, timeout, f"{count}x {name}")

    def wait_state(self, state: str, timeout: float = 60, after: int = 0) -> tuple[str, str, str]:
        def seen() -> bool:
            return any(s == state for _, s, _ in self.board.history[after:])

        self.wait(seen, timeout, f"state {state}")
        return next(h for h in self.board.history[after:] if h[1] == state)

    def quiet(self, seconds: float) -> None:
        """Let the debounce window and any follow-up pass."""
        time.sleep(seconds)


@pytest.fixture
def applied_repo(digits_repo: Path) -> Path:
    done = run_npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return digits_repo


@pytest.fixture
def watch(request: pytest.FixtureRequest) -> Iterator[Callable[..., Harness]]:
    harnesses: list[Harness] = []

    def make(
        repo: Path,
        runner: Runner | None = None,
        options: WatchOptions = FAST,
        paths: list[Path] | None = None,
    ) -> Harness:
        board = RecordingBoard()
        runner = runner or CountingRunner(
            SubprocessRunner(repo, env={"CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"})
        )
        watcher = Watcher(repo, paths or [repo / "specs"], runner=runner, board=board, options=options)
        harness = Harness(watcher, board)
        harnesses.append(harness)
        return harness.start()

    yield make
    for harness in harnesses:
        harness.close()


def set_runs(spec: Path, runs: int) -> None:
    """A real edit: evaluate.runs only changes the evaluate key."""
    text = spec.read_text()
    lines = [f"    runs: {runs}" if line.startswith("    runs:") else line for line in text.splitlines()]
    spec.write_text("\n".join(lines) + "\n")
