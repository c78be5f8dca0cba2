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
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

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


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real repository applied once; each test then changes evaluate's run count, so the held
    apply rebuilds that stage alone."""
    repo = tmp_path_factory.mktemp("signals") / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo)
    (repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    return repo


@pytest.mark.parametrize(("sig", "runs"), [(signal.SIGTERM, 3), (signal.SIGINT, 4)])
def test_a_signal_during_apply_prints_one_line_and_leaves_no_work_folder(
    applied: Path, tmp_path: Path, sig: signal.Signals, runs: int
) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", f"runs: {runs}"))
    lock = applied / "specs" / "digits.lock.json"
    committed = lock.read_bytes()
    marker = tmp_path / "marks.jsonl"
    proc = _held_apply(applied, marker)
    deadline = time.monotonic() + 300
    while not _ran(marker):
        assert proc.poll() is None and time.monotonic() < deadline, "the held evaluate never ran"
        time.sleep(0.05)
    tmp = Layout(applied).tmp
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
    assert lock.read_bytes() == committed  # nothing recorded as built
    assert run_npuctl(applied, "plan").returncode == 2
    spec.write_text(spec.read_text().replace(f"runs: {runs}", "runs: 5"))
