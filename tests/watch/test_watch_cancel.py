"""A save during a build cancels it and restarts with the new inputs; the stale result is never recorded.

The runner is the real `npuctl apply` with the evaluate stage held back after it ran (slow_apply.py),
so the test can save while a finished-but-unrecorded result sits in the child process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reconciler.repo import Layout
from reconciler.state.db import Database
from reconciler.watch.runner import SubprocessRunner
from tests.watch.conftest import CountingRunner, set_runs

SLOW_APPLY = Path(__file__).with_name("slow_apply.py")


def _marks(marker: Path) -> list[dict]:
    if not marker.exists():
        return []
    return [json.loads(line) for line in marker.read_text().splitlines() if line.strip()]


def _runs(config: dict) -> int:
    return int(config["evaluate"]["runs"])


@pytest.mark.slow
def test_a_save_during_a_build_cancels_it_and_the_stale_result_is_not_cached(
    applied_repo: Path, watch, tmp_path: Path
) -> None:
    spec = applied_repo / "specs" / "digits.yaml"
    marker = tmp_path / "marks.jsonl"
    env = {
        "CI": "1",
        "NPUCTL_TEST_SLOW_STAGE": "evaluate",
        "NPUCTL_TEST_SLOW_S": "30",
        "NPUCTL_TEST_MARKER": str(marker),
    }
    command = [sys.executable, str(SLOW_APPLY), "apply", "--json"]
    runner = CountingRunner(SubprocessRunner(applied_repo, command=command, env=env))
    harness = watch(applied_repo, runner=runner)

    set_runs(spec, 6)
    harness.wait(
        lambda: any(m["phase"] == "ran" and _runs(m["config"]) == 6 for m in _marks(marker)), 120, "stale run"
    )
    stale_pid = next(m["pid"] for m in _marks(marker) if _runs(m["config"]) == 6)
    runner.inner.env["NPUCTL_TEST_SLOW_S"] = "0"  # the restarted build is not held
    set_runs(spec, 7)
    harness.wait_event("cancelled", timeout=30)
    harness.wait(lambda: harness.board.lines["digits"].state == "Healthy", 120, "the restarted build")

    marks = _marks(marker)
    stale = [m["phase"] for m in marks if _runs(m["config"]) == 6]
    assert stale == ["started", "ran"], "the stale stage was killed while holding its result"
    assert [m["phase"] for m in marks if _runs(m["config"]) == 7] == ["started", "ran", "returning"]
    assert len(runner.started) == 2

    db = Database(Layout(applied_repo).database)
    try:
        evaluated = {r.key: _runs(r.key_inputs["fields"]) for r in db.all_records() if r.stage == "evaluate"}
        built = [e["key"] for e in db.ledger("digits") if e["stage"] == "evaluate" and e["action"] == "built"]
        cancelled = [e for e in db.ledger("digits") if e["action"] == "cancelled"]
    finally:
        db.close()
    assert len(cancelled) == 1 and "input changed" in cancelled[0]["message"], (
        "the cancelled attempt is in the ledger"
    )
    from reconciler.audit import Filters, run

    attempts = [e for e in run(applied_repo, [], Filters(spec="digits")).entries if e.attempt]
    assert [e.state for e in attempts] == ["cancelled"], "and audit lists it"
    assert 6 not in evaluated.values(), "no record for the stale key"
    assert sorted(evaluated.values()) == [5, 7]
    assert [evaluated[k] for k in built] == [5, 7], "the ledger never saw the stale build complete"
    lock = json.loads((applied_repo / "specs" / "digits.lock.json").read_text())
    assert evaluated[lock["variants"]["default"]["stages"]["evaluate"]["key"]] == 7
    leftovers = list((Layout(applied_repo).tmp).glob(f"{stale_pid}-*"))
    assert leftovers == [], "SIGINT let the cancelled apply clean its work folder"


def test_a_watch_started_with_sigint_ignored_still_cancels_its_build_cleanly(
    applied_repo: Path, tmp_path: Path
) -> None:
    """A script's background `npuctl watch &` (or a test worker) runs with SIGINT ignored, which its
    children inherit: the build it cancels must still stop on SIGINT and clean its work folders."""
    import os
    import signal
    import subprocess
    import time

    spec = applied_repo / "specs" / "digits.yaml"
    set_runs(spec, 6)
    marker = tmp_path / "marks.jsonl"
    env = {
        **os.environ,
        "CI": "1",
        "NPUCTL_WATCH_CHILD": "1",  # what the watcher's runner sets
        "NPUCTL_TEST_SLOW_STAGE": "evaluate",
        "NPUCTL_TEST_SLOW_S": "60",
        "NPUCTL_TEST_MARKER": str(marker),
    }
    ignoring = "import os, signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nos.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", ignoring, str(SLOW_APPLY), "apply", "--json"],
        cwd=applied_repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not any(m["phase"] == "ran" for m in _marks(marker)):
        assert time.monotonic() < deadline and proc.poll() is None, "the held build did not run"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("SIGINT was ignored: the build ran on") from None
    assert code == 130
    assert list(Layout(applied_repo).tmp.glob(f"{proc.pid}-*")) == []
