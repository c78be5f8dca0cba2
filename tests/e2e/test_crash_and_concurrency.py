"""kill -9 at random moments, and two reconcilers on one repository, with the real command."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from reconciler.engine.workspace import Workspace
from tests.conftest import DIGITS_SPEC, copy_digits, git

KILLS = 30
KILLS_PER_RUN = 5
VARIANTS = ((0, 3), (1, 4))
"""(compile optimization level, evaluate runs): groups alternate, so each starts with work to do."""
_LINE = re.compile(r"^npuctl: \S+ \[[^\]]+\] (\w+) (?:built|failed|skipped)(?: in ([0-9.]+) s)?")
"""apply's progress line on stderr, one per stage that did work (cached stages are silent)."""
LOCK_WRITING = "lock writing"
"""The phase after the last stage: verify, judge, write the lock file."""


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
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=10, calib_samples=0)
    return repo


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


class _Apply:
    """One `npuctl apply` whose progress lines are read as they come, so a kill is aimed at a stage (an
    event of the run itself) rather than at a moment that, on a loaded machine, may still be import."""

    def __init__(self, repo: Path) -> None:
        env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
        self.started = time.monotonic()
        self.ended = 0.0
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "apply"],
            cwd=repo,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.events: queue.Queue[tuple[str, float] | None] = queue.Queue()
        self.seen: list[tuple[str, float, float | None]] = []
        """(stage, seconds since start, the stage's own duration) per line read so far."""
        self.last_line_at = 0.0
        """time.time() of the last line (to compare with a file's mtime)."""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            match = _LINE.match(line)
            if match:
                took = float(match[2]) if match[2] else None
                self.seen.append((match[1], time.monotonic() - self.started, took))
                self.last_line_at = time.time()
                self.events.put((match[1], time.monotonic()))
        self.events.put(None)

    def reach(self, stages: list[str]) -> bool:
        """Wait for the line of any of `stages` (the one aimed after, or a later one: a stage recorded
        by the killed run before it printed is silent now); False when the run ended first."""
        while (event := self.events.get(timeout=300)) is not None:
            if event[0] in stages:
                return True
        return False

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.finish()

    def finish(self) -> int:
        code = self.proc.wait(timeout=600)
        self.ended = time.monotonic() - self.started
        self.reader.join(timeout=60)
        return code


def _phases(full: _Apply, idle: _Apply, lock: Path) -> tuple[float, list[tuple[str, float]]]:
    """(start-up seconds, [(phase, seconds)] in order): start-up is how long a run with nothing to do
    takes; the phases come from a full build, a stage lasting from the line before it to its own line,
    and the last phase, verify and lock writing, until the lock file's rename (its mtime), doubled."""
    first, took = full.seen[0][0], full.seen[0][2] or 0.0
    phases = [(first, took)]
    for (_, before, _), (stage, now, _) in zip(full.seen, full.seen[1:], strict=False):
        phases.append((stage, now - before))
    phases.append((LOCK_WRITING, 2 * max(lock.stat().st_mtime - full.last_line_at, 0.01)))
    return idle.ended, phases


def _kill_once(
    repo: Path, rng: random.Random, startup: float, phases: list[tuple[str, float]], done: int
) -> tuple[int, str] | None:
    """Kill an apply inside a random phase still to do (after `done` phases), at a random fraction of
    that phase's measured length. Returns how many phases the run got through and the phase it was
    in (by its own progress lines), or None when it finished before the kill came (nothing killed)."""
    order = [name for name, _ in phases]
    todo = [i for i in range(done, len(phases)) if phases[i][1] >= 0.05 or order[i] == LOCK_WRITING]
    aim = rng.choice(todo)
    run = _Apply(repo)
    if aim > done:
        if not run.reach(order[aim - 1 : -1]):
            run.finish()
            return None
        # lock writing is milliseconds long and its measured length doubled: aim into its first half
        share = 0.5 if order[aim] == LOCK_WRITING else 0.9
        time.sleep(rng.uniform(0.0, share) * phases[aim][1])
    else:
        time.sleep(startup + rng.uniform(0.0, 0.9) * phases[aim][1])
    if run.proc.poll() is not None:
        run.finish()
        return None
    run.kill()
    reached = max((order.index(s) + 1 for s, _, _ in run.seen), default=done)
    return reached, f"during {order[min(reached, len(order) - 1)]}"


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_consistent_state(tmp_path: Path, npuctl) -> None:
    """KILLS kills, each inside a stage (import, check, compile, evaluate) or lock writing, aimed by the
    run's own progress lines at a random fraction of that phase as a full build measured it. After each
    kill: 0 corrupt objects, a sound database and the committed lock evidence intact; after every
    KILLS_PER_RUN kills (each resuming the last one's work), the next run equals a clean build of the
    same spec in a fresh repository at another path (built once per spec variant): no state, no lock
    file, and nothing that depends on where the repository is."""
    rng = random.Random(20261130)
    repo = _repo(tmp_path, "crashy")
    spec = repo / "specs" / "digits.yaml"
    lock_path = repo / "specs" / "digits.lock.json"
    spec.write_text(_spec_text(*VARIANTS[1]))
    full = _Apply(repo)
    assert full.finish() == 0
    idle = _Apply(repo)
    assert idle.finish() == 0 and idle.seen == []
    startup, phases = _phases(full, idle, lock_path)
    order = [name for name, _ in phases]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first build")
    clean: dict[tuple[int, int], dict] = {}
    phases_hit: Counter[str] = Counter()
    misses = 0
    for group in range(KILLS // KILLS_PER_RUN):
        variant = VARIANTS[group % 2]  # never the last group's: its keys are all in the lock file
        if group % 2 == 0:
            shutil.rmtree(repo / ".npuctl", ignore_errors=True)
        spec.write_text(_spec_text(*variant))
        committed = lock_path.read_bytes()
        # a new level changes compile's key only: with the state kept, the work starts at compile
        start = 0 if group % 2 == 0 else order.index("compile")
        done, kills = start, 0
        while kills < KILLS_PER_RUN:
            killed = _kill_once(repo, rng, startup, phases, done)
            if killed is None:  # it finished first: make the work again
                misses += 1
                assert misses <= KILLS, "the kills keep missing the runs"
                shutil.rmtree(repo / ".npuctl", ignore_errors=True)
                lock_path.write_bytes(committed)  # the new lock would make every stage up to date
                done = 0
                continue
            kills, done = kills + 1, min(killed[0], len(phases) - 1)
            where = f"group {group} kill {kills}"
            written = lock_path.read_bytes() != committed
            phases_hit["after the lock was written" if written else killed[1]] += 1
            _evidence_intact(lock_path, committed)
            _consistent(repo, where)
            if written:  # nothing left to do: start the group's work again from its start
                shutil.rmtree(repo / ".npuctl", ignore_errors=True)
                lock_path.write_bytes(committed)
                done = 0
        resumed_run = npuctl(repo, "apply", "--json")
        assert resumed_run.returncode == 0, (
            f"group {group}: {resumed_run.stdout[-1500:]} {resumed_run.stderr[-1500:]}"
        )
        _consistent(repo, f"group {group} after the next run")
        resumed = _deterministic(json.loads(lock_path.read_text()))
        if variant not in clean:  # a clean build of the same spec in another repository
            elsewhere = _repo(tmp_path / "elsewhere", f"clean-{len(clean)}")
            (elsewhere / "specs" / "digits.yaml").write_text(spec.read_text())
            assert npuctl(elsewhere, "apply").returncode == 0
            clean[variant] = _deterministic(
                json.loads((elsewhere / "specs" / "digits.lock.json").read_text())
            )
        assert resumed == clean[variant], f"group {group}"
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"group {group}", "--allow-empty")
    print(f"kill -9 points: {dict(phases_hit)}; runs that finished before their kill: {misses}")
    assert sum(phases_hit.values()) >= 30
    # spread over the run, not bunched in one phase (which phases: chance; lock writing for certain only
    # in the strace test below)
    assert len([p for p in phases_hit if p.startswith("during")]) >= 3, phases_hit


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


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace missing (.ci/setup installs it)")
def test_kill_9_inside_the_lock_write_keeps_the_committed_lock(tmp_path: Path, npuctl) -> None:
    """A kill at the one moment the random kills can only hope to hit: the lock file's new content
    written to its temp file, not yet renamed over the old one. An SLO-only change makes the lock write
    the run's only durable write, so its temp file's fsync is the run's first: strace delivers SIGKILL
    as that fsync is entered (the leftover temp file below proves where it landed). The committed lock
    must stay whole, the state sound, and the next run must write the new lock and leave no temp file."""
    repo = _repo(tmp_path, "lockwrite")
    spec = repo / "specs" / "digits.yaml"
    lock_path = repo / "specs" / "digits.lock.json"
    spec.write_text(_spec_text(*VARIANTS[0]))
    assert npuctl(repo, "apply").returncode == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "built")
    committed = lock_path.read_bytes()
    spec.write_text(spec.read_text().replace("accuracy: {min: 0.5}", "accuracy: {min: 0.4}"))
    traced = subprocess.run(
        ["strace", "-qq", "-o", os.devnull, "-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1",
         sys.executable, "-m", "reconciler", "apply"],
        cwd=repo, env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert traced.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), (traced.returncode, traced.stderr)
    assert lock_path.read_bytes() == committed, "the kill came before the rename: the old lock stays"
    leftovers = sorted(p.name for p in lock_path.parent.glob(f".{lock_path.name}.*.tmp"))
    assert leftovers, "the kill was meant to land with the new content in its temp file"
    _consistent(repo, "after the kill inside the lock write")
    resumed = npuctl(repo, "apply")
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    assert lock_path.read_bytes() != committed
    assert json.loads(lock_path.read_text())["variants"]["default"]["verdicts"]
    assert not list(lock_path.parent.glob(f".{lock_path.name}.*.tmp")), "a temp lock file was left behind"
    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == [" M specs/digits.lock.json", " M specs/digits.yaml"], status
