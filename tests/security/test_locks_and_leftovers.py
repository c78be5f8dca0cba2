"""Liveness and leftovers: a stuck lock holder is reported by pid and age and waited for only so long;
temporary files live under `.npuctl/tmp` and go away; lock files are world-readable (0644)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends.sdk import toolchains
from tests.conftest import DIGITS_SPEC, copy_digits, run_npuctl

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


RK_SPEC = DIGITS_SPEC.replace("target: cpu", "target: rk3588").replace(
    "  evaluate:",
    "  quantization:\n    mode: ptq\n    calibration: {{data: ../data/calib, samples: 4}}\n  evaluate:",
)


@pytest.mark.slow
@pytest.mark.skipif(
    toolchains.python(toolchains.RKNN) is None, reason="needs `npuctl toolchain install rknn` (.ci/setup)"
)
def test_gc_removes_the_rknn_folder_a_kill_9_left_in_tmp(git_repo: Path) -> None:
    """rknn-toolkit2 builds in `/tmp/npuctl-rknn-*` (a fixed-length path: it embeds it in the .rknn),
    outside the run's own temporary folder. A real apply killed with -9 while the toolkit works leaves
    that folder behind; `npuctl gc` removes it with the dead run's folder, and nothing else in /tmp."""
    copy_digits(git_repo, eval_samples=2, calib_samples=4)
    (git_repo / "specs" / "rk.yaml").write_text(RK_SPEC.format(name="rk"))
    env = {**os.environ, "CI": "1"}
    apply = subprocess.Popen(
        [sys.executable, "-I", "-m", "reconciler", "apply"],
        cwd=git_repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        pointers: list[Path] = []
        while not pointers and apply.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            pointers = list((git_repo / ".npuctl" / "tmp").glob("*/*.outside-tmp"))
        assert pointers, "the rknn stage never made its folder"
        os.killpg(apply.pid, signal.SIGKILL)
    finally:
        if apply.poll() is None:
            os.killpg(apply.pid, signal.SIGKILL)
        apply.wait()
    left = Path(pointers[0].read_text())
    assert left.parent == Path("/tmp") and left.name.startswith("npuctl-rknn-") and left.is_dir()
    done = run_npuctl(git_repo, "gc", "--json")
    assert done.returncode == 0, done.stderr
    removed = json.loads(done.stdout)["temp_removed"]
    assert not left.exists()
    assert not pointers[0].parent.exists()  # the dead run's own temporary folder went too
    outside = [p for p in removed if not Path(p).is_relative_to(git_repo / ".npuctl" / "tmp")]
    assert outside == [str(left)] and str(pointers[0].parent) in removed  # and nothing else
