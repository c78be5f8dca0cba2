"""An apply leaves the state settled for plan, and an edit to one spec costs that spec's work.

Counted in calls, never timed: the specs planned in full (plan_spec), the lock files parsed
(lockfile.read), the spec files parsed (the YAML loader) and opened at all. Four digits specs that
share one model and data folder, each with its own threshold, so each has its own lock file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine import plan as plan_mod
from reconciler.engine.apply import apply_all, lock_stats, settle
from reconciler.engine.reporter import Reporter
from reconciler.engine.results import SpecResult
from reconciler.engine.workspace import Workspace
from reconciler.spec import LoadedSpec, _check, check
from reconciler.state import lockfile
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

NAMES = ("one", "two", "three", "four")
TICK = 0.15
"""Longer than statcache.RACY_NS: a file changed this long before a run is trusted by its stat."""


@dataclass
class Counts:
    planned: list[str] = field(default_factory=list)
    locks_parsed: list[str] = field(default_factory=list)
    specs_parsed: list[str] = field(default_factory=list)
    specs_opened: list[str] = field(default_factory=list)


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    counts = Counts()
    real_plan, real_read, real_attempt, real_open = (
        plan_mod.plan_spec,
        lockfile.read,
        _check.attempt,
        os.open,
    )

    def plan_spec(ws: Workspace, spec: LoadedSpec) -> SpecResult:
        counts.planned.append(spec.name)
        return real_plan(ws, spec)

    def read(path: Path) -> dict[str, Any] | None:
        counts.locks_parsed.append(Path(path).name)
        return real_read(path)

    def attempt(file: Path, root: Path) -> Any:
        counts.specs_parsed.append(Path(file).name)
        return real_attempt(file, root)

    def opened(path: Any, *args: Any, **kwargs: Any) -> int:
        name = os.fsdecode(path)
        if name.endswith(".yaml") and "/specs/" in name:
            counts.specs_opened.append(Path(name).name)
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(plan_mod, "plan_spec", plan_spec)
        m.setattr(lockfile, "read", read)
        m.setattr(_check, "attempt", attempt)
        m.setattr(os, "open", opened)  # pathpolicy.open_regular: discovery's read of a file's kind
        yield counts


def _specs(repo: Path) -> list[LoadedSpec]:
    return [r.spec for r in check([repo / "specs"], repo) if r.spec is not None]


def _plan(repo: Path) -> dict[str, SpecResult]:
    ws = Workspace.open(repo)
    try:
        return {r.name: r for r in plan_mod.plan_all(ws, _specs(repo))}
    finally:
        ws.close()


def _apply(repo: Path) -> list[SpecResult]:
    """As `npuctl apply` runs it: every spec, then the settle step."""
    ws = Workspace.open(repo)
    try:
        specs = _specs(repo)
        before = lock_stats(specs)
        results = apply_all(ws, specs, Reporter())
        settle(ws, specs, results, before)
    finally:
        ws.close()
    assert all(not r.errors for r in results), [r.errors for r in results]
    return results


def _edit(repo: Path, name: str, old: str, new: str) -> None:
    spec = repo / "specs" / f"{name}.yaml"
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new))
    time.sleep(TICK)  # an edit a moment before the run, as a user makes it


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("settle") / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo, eval_samples=6, calib_samples=0)
    for i, name in enumerate(NAMES):
        text = DIGITS_SPEC.format(name=name).replace("p90: 1000", f"p90: {1000 + i}")
        assert f"p90: {1000 + i}" in text
        (repo / "specs" / f"{name}.yaml").write_text(text)
    _apply(repo)
    return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy, settled: new inodes invalidate every stat the template's caches hold."""
    copy = tmp_path / "repo"
    shutil.copytree(template, copy, symlinks=True, copy_function=shutil.copy2)
    time.sleep(TICK)
    for _ in range(3):  # the first plan hashes the copied files again, the next remembers them
        with counted(monkeypatch) as counts:
            _plan(copy)
        if not counts.planned:
            return copy
    raise AssertionError("the copy never settled")


def test_the_first_plan_after_an_apply_plans_and_parses_nothing(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(repo, "two", "p90: 1001", "p90: 7")
    _apply(repo)  # rewrites two.lock.json with the new verdicts; the next plan runs at once (racy)
    with counted(monkeypatch) as counts:
        results = _plan(repo)
    assert counts.planned == [] and counts.locks_parsed == [] and counts.specs_parsed == []
    assert counts.specs_opened == []  # discovery knows them from the validated-spec cache
    assert [v.threshold for v in results["two"].slo if v.name == "latency_ms.p90"] == [7]
    assert {s.action for r in results.values() for s in r.stages} == {"cached"}


def test_an_edit_to_one_spec_is_seen_and_plans_only_that_spec(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(repo, "two", "p90: 1001", "p90: 5")  # a threshold: no stage key moves
    with counted(monkeypatch) as counts:
        results = _plan(repo)
    assert counts.planned == ["two"]
    assert counts.specs_parsed == ["two.yaml"] and set(counts.specs_opened) == {"two.yaml"}
    assert counts.locks_parsed == ["two.lock.json"]  # its stages are in the local store
    assert {s.name: s.action for s in results["two"].stages}["verify"] == "rejudge"
    assert {s.action for n, r in results.items() if n != "two" for s in r.stages} == {"cached"}

    _edit(repo, "three", "runs: 5", "runs: 4")  # evaluate's key moves: a rebuild
    with counted(monkeypatch) as counts:
        results = _plan(repo)
    assert sorted(counts.planned) == ["three", "two"]  # two stays unsettled until applied
    assert counts.specs_parsed == ["three.yaml"]
    actions = {s.name: s.action for s in results["three"].stages}
    assert actions["evaluate"] == "build" and actions["import"] == "cached"
    assert {s.action for n in ("one", "four") for s in results[n].stages} == {"cached"}


def test_a_lock_written_by_apply_is_witnessed_by_its_content_and_only_its_spec_replanned(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock file apply has just written is racy (a second write within its timestamp tick would
    keep its stat): its witness carries the digest of the content the entry was derived from, instead
    of the entry being dropped. A rewrite with other content, its mtime put back, re-plans that spec
    alone."""
    _edit(repo, "four", "p90: 1003", "p90: 8")
    _apply(repo)
    lock = repo / "specs" / "four.lock.json"
    settled = json.loads((repo / ".npuctl" / "cache" / "settled.json").read_text())
    (witness,) = [w for w in settled["paths"] if w[0] == str(lock)]
    assert len(witness) == 3 and witness[2] == hashlib.sha256(lock.read_bytes()).hexdigest()
    before = os.stat(lock)
    text = lock.read_text()
    lock.write_text(text.replace('"threshold": 8', '"threshold": 9'))
    os.utime(lock, ns=(before.st_atime_ns, before.st_mtime_ns))
    with counted(monkeypatch) as counts:
        results = _plan(repo)
    assert counts.planned == ["four"]
    assert results["four"].lock_problems or any(s.action != "cached" for s in results["four"].stages)


def test_the_cli_apply_records_the_plan_that_follows(repo: Path) -> None:
    _edit(repo, "one", "p90: 1000", "p90: 900")  # an edit no loaded machine can fail
    assert run_npuctl(repo, "apply").returncode == 0
    replays = list((repo / ".npuctl" / "cache" / "replay").glob("*.json"))
    assert len(replays) == 1  # written by the apply
    # replayed, not planned and recorded again: the planner is never imported
    probe = (
        "import sys\nsys.argv = ['npuctl', 'plan']\nfrom reconciler.cli import main\ntry:\n    main()\n"
        "finally:\n    print('PLANNER', 'reconciler.engine.plan' in sys.modules, file=sys.stderr)\n"
    )
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}  # as run_npuctl: the same replay key
    replayed = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert replayed.stderr.splitlines()[-1] == "PLANNER False", replayed.stderr
    full = run_npuctl(repo, "plan", env={"NPUCTL_NO_CACHE": "1"})
    body = [ln for ln in replayed.stdout.splitlines() if not ln.startswith("plan:")]
    assert body == [ln for ln in full.stdout.splitlines() if not ln.startswith("plan:")]
    assert replayed.returncode == full.returncode == 0
