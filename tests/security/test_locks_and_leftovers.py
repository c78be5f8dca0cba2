"""Liveness and leftovers: a stuck lock holder is reported by pid and age and waited for only so long;
temporary files live under `.npuctl/tmp` and go away; lock files are world-readable (0644)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_npuctl

HOLDER = """
import sys, time
from pathlib import Path
from reconciler.state import locks
with locks.hold(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def _bump(spec: Path) -> None:
    text = spec.read_text()
    spec.write_text(text.replace("warmup: 1", "warmup: 2"))


def test_a_stopped_lock_holder_is_named_by_pid_and_age_and_not_waited_for_ever(built_repo: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(built_repo / ".npuctl" / "locks"), "spec-a"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        for name in ("a", "b"):
            _bump(built_repo / "specs" / f"{name}.yaml")
        done = run_npuctl(built_repo, "apply", "--json", env={"NPUCTL_LOCK_TIMEOUT_S": "3"})
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
    assert done.returncode == 1, done.stderr
    results = {s["name"]: s for s in json.loads(done.stdout)["specs"]}
    (error,) = results["a"]["errors"]
    assert f"held by pid {holder.pid} (stopped)" in error and " s)" in error and "\n" not in error, error
    assert f"waiting for lock on a: held by pid {holder.pid} (stopped)" in done.stderr
    assert results["b"]["health"] == "Healthy"  # the other spec carried on
    assert {s["name"]: s["action"] for s in results["b"]["stages"]}["evaluate"] == "built"
    assert run_npuctl(built_repo, "apply").returncode == 0  # the holder is gone: the next run builds


def test_temporary_files_stay_under_npuctl_tmp_and_are_removed(built_repo: Path, tmp_path: Path) -> None:
    machine_tmp = tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    _bump(built_repo / "specs" / "a.yaml")
    done = run_npuctl(built_repo, "apply", "--json", env={"TMPDIR": str(machine_tmp)})
    assert done.returncode == 0, done.stderr
    assert list(machine_tmp.iterdir()) == []  # nothing in the machine's temporary folder
    assert list((built_repo / ".npuctl" / "tmp").iterdir()) == []  # and nothing left behind
    dead = built_repo / ".npuctl" / "tmp" / "4194303-tmp-leftover"  # above pid_max: never alive
    (dead / "npuctl-eval-x").mkdir(parents=True)
    assert run_npuctl(built_repo, "gc").returncode == 0
    assert not dead.exists()


def test_lock_files_are_written_0644(built_repo: Path) -> None:
    lock = built_repo / "specs" / "a.lock.json"
    lock.chmod(0o600)
    _bump(built_repo / "specs" / "a.yaml")
    assert run_npuctl(built_repo, "apply").returncode == 0
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644
