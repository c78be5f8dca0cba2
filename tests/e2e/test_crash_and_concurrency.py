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

KILLS = 33
KILLS_PER_RUN = 3


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


def _phase(repo: Path, lock_before: bytes | None) -> str:
    """Where a killed apply was: the last stage it recorded as built, or the lock file it had written."""
    lock = repo / "specs" / "digits.lock.json"
    if lock.exists() and lock_before is not None and lock.read_bytes() != lock_before:
        return "after lock writing"
    try:
        conn = sqlite3.connect(repo / ".npuctl" / "state.db")
        row = conn.execute(
            "SELECT stage FROM ledger WHERE action = 'built' ORDER BY id DESC LIMIT 1"
        ).fetchone()
        conn.close()
    except sqlite3.Error:
        return "before the database"
    if row is None:
        return "before any stage"
    return {"compile": "during evaluate", "evaluate": "verify or lock writing"}.get(row[0], f"after {row[0]}")


def _evidence_intact(lock_path: Path, committed: bytes | None) -> None:
    """0 lost committed evidence: the lock file is the committed one or a complete newer one."""
    if committed is None:
        return
    data = json.loads(lock_path.read_text())  # never truncated: written by temp file + rename
    for variant in data["variants"].values():
        assert variant["verdicts"], "a lock file lost its verdicts"


def _consistent(repo: Path, where: str) -> None:
    """0 corrupt objects, every head usable, SQLite's integrity check passes."""
    if not (repo / ".npuctl" / "state.db").exists():
        return
    ws = Workspace.open(repo)
    try:
        assert ws.store.verify() == [], f"{where}: an object's content does not match its name"
        for key in ws.db.head_keys():
            record = ws.db.record(key)
            assert record is not None and ws.usable(record), f"{where}: head {key[:12]} is unusable"
    finally:
        ws.close()
    integrity = sqlite3.connect(repo / ".npuctl" / "state.db").execute("PRAGMA integrity_check").fetchone()
    assert integrity == ("ok",), where


def _kill_once(repo: Path, delay: float) -> None:
    for _attempt in range(6):
        proc = _popen(repo)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return
        proc.communicate()  # finished before the kill: make work again and strike sooner
        shutil.rmtree(repo / ".npuctl", ignore_errors=True)
        delay /= 2
    pytest.fail("no apply was still running to kill")


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_consistent_state(tmp_path: Path, npuctl) -> None:
    """KILLS kills at random points spread over a whole apply (its duration measured first), so they
    land in the stages, evaluate, verify and lock writing. After each kill: 0 corrupt objects, a sound
    database and the committed lock evidence intact; after every KILLS_PER_RUN kills (each resuming
    the last one's work), the next run equals a clean build of the same spec in the same place."""
    rng = random.Random(20261130)
    repo = _repo(tmp_path, "crashy")
    spec = repo / "specs" / "digits.yaml"
    lock_path = repo / "specs" / "digits.lock.json"
    spec.write_text(_spec_text(0, 3))
    started = time.monotonic()
    assert npuctl(repo, "apply").returncode == 0
    full_s = time.monotonic() - started
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first build")
    phases: Counter[str] = Counter()
    for group in range(KILLS // KILLS_PER_RUN):
        variant = (rng.randrange(2), rng.choice((3, 4)))
        if group % 2 == 0:
            shutil.rmtree(repo / ".npuctl", ignore_errors=True)
        spec.write_text(_spec_text(*variant))
        committed = lock_path.read_bytes() if lock_path.exists() else None
        for kill in range(KILLS_PER_RUN):
            where = f"group {group} kill {kill}"
            _kill_once(repo, rng.uniform(0.25, 1.0) * full_s)
            phases[_phase(repo, committed)] += 1
            _evidence_intact(lock_path, committed)
            _consistent(repo, where)
        done = npuctl(repo, "apply", "--json")
        assert done.returncode == 0, f"group {group}: {done.stdout[-1500:]} {done.stderr[-1500:]}"
        _consistent(repo, f"group {group} after the next run")
        resumed = _deterministic(json.loads(lock_path.read_text()))
        # a clean build of the same spec in the same place (no state, no lock file) must agree
        shutil.rmtree(repo / ".npuctl")
        lock_path.unlink()
        assert npuctl(repo, "apply").returncode == 0
        assert resumed == _deterministic(json.loads(lock_path.read_text())), f"group {group}"
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"group {group}", "--allow-empty")
    print(f"kill -9 points: {dict(phases)}")
    assert sum(phases.values()) >= 30
    assert phases["during evaluate"] + phases["verify or lock writing"] > 0, phases


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
