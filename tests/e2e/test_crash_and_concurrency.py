"""kill -9 at random moments, and two reconcilers on one repository, with the real command."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from reconciler.engine.workspace import Workspace
from tests.conftest import DIGITS_SPEC, copy_digits, git

TRIALS = 20


def _spec_text(level: int, runs: int) -> str:
    return (
        DIGITS_SPEC.format(name="digits")
        .replace("runs: 5", f"runs: {runs}")
        .replace("  slo:", f"  compile: {{optimization_level: {level}}}\n  slo:")
    )


def _deterministic(lock: dict) -> dict:
    """What a clean build must reproduce exactly: every stage key and every artifact digest but the
    measurements of evaluate (timings differ run to run by nature)."""
    stages = lock["variants"]["default"]["stages"]
    return {
        name: (
            stage["key"],
            None if name == "evaluate" else sorted(a["digest"] for a in stage["artifacts"].values()),
        )
        for name, stage in stages.items()
    }


def _popen(repo: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", "--json"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _repo(base: Path, name: str) -> Path:
    repo = base / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=10, calib_samples=0)
    return repo


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_consistent_state(tmp_path: Path, npuctl) -> None:
    rng = random.Random(20261130)
    reference_repo = _repo(tmp_path, "reference")
    references: dict[tuple[int, int], dict] = {}
    repo = _repo(tmp_path, "crashy")
    spec = repo / "specs" / "digits.yaml"
    lock_path = repo / "specs" / "digits.lock.json"
    killed_mid_build = 0
    for trial in range(TRIALS):
        variant = (rng.randrange(4), rng.choice((3, 4)))
        if variant not in references:
            (reference_repo / "specs" / "digits.yaml").write_text(_spec_text(*variant))
            shutil.rmtree(reference_repo / ".npuctl", ignore_errors=True)
            assert npuctl(reference_repo, "apply").returncode == 0
            references[variant] = _deterministic(
                json.loads((reference_repo / "specs" / "digits.lock.json").read_text())
            )
        if trial % 3 == 0:
            shutil.rmtree(repo / ".npuctl", ignore_errors=True)
        spec.write_text(_spec_text(*variant))
        delay = rng.uniform(0.2, 3.0)
        for _attempt in range(6):
            proc = _popen(repo)
            time.sleep(delay)
            if proc.poll() is None:
                killed_mid_build += 1
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                break
            proc.communicate()  # finished before the kill: make work again and strike sooner
            shutil.rmtree(repo / ".npuctl", ignore_errors=True)
            delay /= 2
        done = npuctl(repo, "apply", "--json")
        assert done.returncode == 0, f"trial {trial}: {done.stdout[-1500:]} {done.stderr[-1500:]}"
        ws = Workspace.open(repo)
        try:
            assert ws.store.verify() == [], f"trial {trial}: an object's content does not match its name"
            for key in ws.db.head_keys():
                record = ws.db.record(key)
                assert record is not None and ws.usable(record), f"trial {trial}: head {key[:12]} is unusable"
        finally:
            ws.close()
        integrity = (
            sqlite3.connect(repo / ".npuctl" / "state.db").execute("PRAGMA integrity_check").fetchone()
        )
        assert integrity == ("ok",)
        assert _deterministic(json.loads(lock_path.read_text())) == references[variant], f"trial {trial}"
    assert killed_mid_build == TRIALS, "every trial killed an apply while it was running"


@pytest.mark.slow
def test_two_applies_at_once_build_each_stage_exactly_once(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "shared")
    for name in ("a", "b"):
        (repo / "specs" / f"{name}.yaml").write_text(DIGITS_SPEC.format(name=f"digits-{name}"))
    first, second = _popen(repo), _popen(repo)
    outputs = [proc.communicate(timeout=600) for proc in (first, second)]
    assert first.returncode == 0, outputs[0]
    assert second.returncode == 0, outputs[1]
    from reconciler.state.db import Database

    ledger = Database(repo / ".npuctl" / "state.db").ledger()
    built = Counter(e["key"] for e in ledger if e["action"] == "built")
    assert built, "something was built"
    assert max(built.values()) == 1, f"a stage was built twice: {built.most_common(3)}"
    # The two specs are identical but for their name, so every stage key is shared: built once in all.
    assert len(built) == len({e["key"] for e in ledger if e["action"] == "built"})
    for out, _ in outputs:
        payload = json.loads(out)
        assert all(s["status"] == "Healthy" for s in payload["specs"])
