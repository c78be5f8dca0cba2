"""The entry point stops on SIGTERM as on SIGINT: one line naming the signal, exit 128 + its number,
and no work folder left under `.npuctl/tmp` (a real apply, held in its evaluate stage, signalled)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.repo import Layout
from tests.conftest import run_npuctl

SLOW_APPLY = Path(__file__).resolve().parents[1] / "watch" / "slow_apply.py"


def _held_apply(repo: Path, marker: Path) -> subprocess.Popen[str]:
    """`npuctl apply` whose evaluate stage, once it ran, waits 60 s before returning its result."""
    env = {
        **os.environ,
        "CI": "1",
        "NPUCTL_TEST_SLOW_STAGE": "evaluate",
        "NPUCTL_TEST_SLOW_S": "60",
        "NPUCTL_TEST_MARKER": str(marker),
    }
    return subprocess.Popen(
        [sys.executable, str(SLOW_APPLY), "apply"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a test worker may ignore it
    )


def _ran(marker: Path) -> bool:
    lines = marker.read_text().splitlines() if marker.exists() else []
    return any(json.loads(line)["phase"] == "ran" for line in lines if line.strip())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_apply_prints_one_line_and_leaves_no_work_folder(
    digits_repo: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "marks.jsonl"
    proc = _held_apply(digits_repo, marker)
    deadline = time.monotonic() + 300
    while not _ran(marker):
        assert proc.poll() is None and time.monotonic() < deadline, "the held evaluate never ran"
        time.sleep(0.05)
    tmp = Layout(digits_repo).tmp
    assert list(tmp.glob(f"{proc.pid}-*")), "the apply had work folders while it ran"
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{sig.name} did not stop the apply") from None
    assert proc.returncode == 128 + sig, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("npuctl: digits [")]
    assert lines == [
        f"npuctl: stopped by {sig.name}: the work in progress was discarded and its work folders removed"
    ], err
    assert list(tmp.iterdir()) == []
    assert not (digits_repo / "specs" / "digits.lock.json").exists()  # nothing recorded as built
    assert run_npuctl(digits_repo, "plan").returncode == 2
