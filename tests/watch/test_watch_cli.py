"""The real `npuctl watch` command in a subprocess: builds, reacts to a save, survives a bad save, stops on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.watch.conftest import set_runs


class Lines:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.items: list[dict] = []
        self.raw: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.raw.append(line)
            self.items.append(json.loads(line))

    def wait(self, state: str, after: int = 0, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, item in enumerate(self.items[after:], start=after):
                if item.get("event") == "status" and item["state"] == state:
                    return i
            time.sleep(0.05)
        raise AssertionError(f"no {state!r} status; got {self.raw}")


@pytest.mark.slow
def test_npuctl_watch_end_to_end(digits_repo: Path) -> None:
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", "--json", "--debounce", "200"],
        cwd=digits_repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(proc)
    try:
        ready = lines.wait("Healthy")
        assert "2/2 SLOs met" in lines.items[ready]["detail"]
        spec = digits_repo / "specs" / "digits.yaml"
        good = spec.read_text()
        spec.write_text(good.replace("runs: 5", "runs: [5"))
        invalid = lines.wait("invalid", after=ready)
        assert re.search(r"digits\.yaml:\d+:\d+: ", lines.items[invalid]["detail"])
        set_runs(spec, 6)  # the next save is picked up: the watcher survived the bad one
        building = lines.wait("building", after=invalid)
        lines.wait("Healthy", after=building)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 130, proc.stderr.read() if proc.stderr else ""
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    verdicts = lock["variants"]["default"]["verdicts"]
    assert all(v["passed"] is True for v in verdicts)
