"""The settled-spec cache: reused only while nothing a spec's plan read changed, else the full path.

Each test starts from one applied digits spec that extends a base, waits until a plan fills the cache
and a second plan takes every result from it, then changes one kind of input and checks that the next
plan re-derives the spec (plan_spec runs) and reports what the change means.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine import apply as apply_mod
from reconciler.engine import plan as plan_mod
from reconciler.engine import world
from reconciler.engine.apply import apply_all
from reconciler.engine.reporter import Reporter
from reconciler.engine.results import SpecResult
from reconciler.engine.workspace import Workspace
from reconciler.spec import LoadedSpec, check
from reconciler.state import statcache
from tests.conftest import copy_digits, git, run_npuctl

BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
spec:
  model: {path: ../../models/digits.onnx, version: v1}
  inputs: {image: [1, 1, 8, 8]}
  evaluate: {data: ../../data/eval, labels: ../../data/eval/labels.txt, warmup: 0, runs: 2}
"""
SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
extends: bases/digits.base.yaml
metadata: {name: one}
spec:
  target: cpu
  slo:
    latency_ms: {p90: 1000}
"""
TICK = 0.15
"""Longer than statcache.RACY_NS: a file changed just before a run is never trusted by its stat."""


def _specs(repo: Path) -> list[LoadedSpec]:
    return [r.spec for r in check([repo / "specs"], repo) if r.spec is not None]


def _plan(repo: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SpecResult, list[str]]:
    """One in-process plan; returns its result and the specs planned in full (not from the cache)."""
    full: list[str] = []
    real = plan_mod.plan_spec

    def counted(ws: Workspace, spec: LoadedSpec) -> SpecResult:
        full.append(spec.name)
        return real(ws, spec)

    time.sleep(TICK)
    with monkeypatch.context() as m:
        m.setattr(plan_mod, "plan_spec", counted)
        ws = Workspace.open(repo)
        try:
            (result,) = plan_mod.plan_all(ws, _specs(repo))
        finally:
            ws.close()
    return result, full


def _apply(repo: Path, remeasure: bool = False) -> SpecResult:
    ws = Workspace.open(repo)
    try:
        (result,) = apply_all(ws, _specs(repo), Reporter(), remeasure=remeasure)
    finally:
        ws.close()
    assert not result.errors, result.errors
    return result


def _settle(repo: Path, monkeypatch: pytest.MonkeyPatch) -> SpecResult:
    """Plans until a plan takes the spec from the cache (the first ones may re-hash or see a fresh db)."""
    for _ in range(4):
        result, full = _plan(repo, monkeypatch)
        if not full:
            return result
    raise AssertionError("the settled cache never served the spec")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("settled") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    copy_digits(repo, eval_samples=6, calib_samples=0)
    (repo / "specs" / "bases").mkdir(parents=True)
    (repo / "specs" / "bases" / "digits.base.yaml").write_text(BASE)
    (repo / "specs" / "one.yaml").write_text(SPEC)
    assert _apply(repo).status == "Healthy"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "settled")
    return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(template, copy, symlinks=True, copy_function=shutil.copy2)
    shutil.rmtree(copy / ".npuctl" / "cache", ignore_errors=True)
    _settle(copy, monkeypatch)
    return copy


def _actions(result: SpecResult) -> dict[str, str]:
    return {s.name: s.action for s in result.stages}


def test_a_settled_spec_is_served_from_the_cache_exactly_and_a_noop_writes_nothing(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = repo / ".npuctl" / "cache" / "settled.json"
    stamp = os.stat(cache).st_mtime_ns
    hit, full = _plan(repo, monkeypatch)
    assert full == []
    applied: list[str] = []
    real = apply_mod.apply_spec

    def counted(ws: Workspace, spec: LoadedSpec, *args: Any) -> SpecResult:
        applied.append(spec.name)
        return real(ws, spec, *args)

    with monkeypatch.context() as m:
        m.setattr(apply_mod, "apply_spec", counted)
        again = _apply(repo)
    assert applied == [] and again.status == "Healthy"
    assert os.stat(cache).st_mtime_ns == stamp  # a no-op plan or apply writes nothing
    cache.unlink()  # the full path gives the same answer, field for field
    fresh, full = _plan(repo, monkeypatch)
    assert full == ["one"] and fresh.to_json() == hit.to_json()


def test_a_spec_edit_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 999"))
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"] and _actions(result)["verify"] == "rejudge"


def test_a_base_edit_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = repo / "specs" / "bases" / "digits.base.yaml"
    base.write_text(base.read_text().replace("runs: 2", "runs: 3"))
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"] and _actions(result)["evaluate"] == "build"


def test_a_lock_file_checked_out_by_git_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 999"))
    _apply(repo)  # the lock now records p90 999
    _settle(repo, monkeypatch)
    git(repo, "checkout", "HEAD", "--", "specs/one.lock.json")  # the committed lock, p90 1000
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"] and _actions(result)["verify"] == "rejudge"


def test_a_touched_model_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.utime(repo / "models" / "digits.onnx")  # same bytes, new stat: re-derived (and still cached)
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"] and set(_actions(result).values()) == {"cached"}


def test_a_data_file_added_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = repo / "data" / "eval"
    sample = next(p for p in sorted(data.iterdir()) if p.name != "labels.txt")
    shutil.copy2(sample, data / f"extra{sample.suffix}")
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"] and _actions(result)["evaluate"] == "build"


def test_another_apply_writing_state_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _apply(repo, remeasure=True)  # new measurements in the store and the lock file
    lock = json.loads((repo / "specs" / "one.lock.json").read_text())
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"]
    recorded = lock["variants"]["default"]["measurements"]["latency_ms.p90"]["value"]
    assert result.measurements["default"]["latency_ms.p90"]["value"] == recorded


def test_a_changed_code_file_invalidates(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited = str(Path(plan_mod.__file__))
    real = world.stat_of
    with monkeypatch.context() as m:  # as an edit or an upgrade of plan.py leaves its stat
        m.setattr(world, "stat_of", lambda p: [0, 0, 0, 0] if str(p) == edited else real(p))
        _, full = _plan(repo, monkeypatch)
    assert full == ["one"]


def test_a_tampered_lock_is_still_caught(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock_file = repo / "specs" / "one.lock.json"
    before = os.stat(lock_file)
    lock = json.loads(lock_file.read_text())
    measured = lock["variants"]["default"]["measurements"]["latency_ms.p90"]
    measured["value"] = measured["value"] / 2
    lock_file.write_text(json.dumps(lock, indent=2))
    os.utime(lock_file, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back; ctime moved
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"]
    assert any("latency_ms.p90" in p and "digest" in p for p in result.lock_problems), result.lock_problems


def test_with_the_caches_off_every_plan_is_the_full_path_and_the_same_answer(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = repo / ".npuctl" / "cache" / "settled.json"
    stamp = os.stat(cache).st_mtime_ns
    hit, full = _plan(repo, monkeypatch)
    assert full == []
    monkeypatch.setenv(statcache.OFF_ENV, "1")
    statcache.enabled.cache_clear()
    try:
        for _ in range(2):
            off, full = _plan(repo, monkeypatch)
            assert full == ["one"] and off.to_json() == hit.to_json()
    finally:
        monkeypatch.delenv(statcache.OFF_ENV)
        statcache.enabled.cache_clear()
    assert os.stat(cache).st_mtime_ns == stamp  # neither read into nor written


def test_a_spec_edited_after_it_was_read_is_not_remembered_under_its_new_stat(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan computes from the text it read; an edit that lands after the read (but before the cache
    is written) must not be recorded as what that result was computed from, or the next plan would
    serve the old text's result for the new one."""
    read = _specs(repo)
    time.sleep(TICK)
    (repo / "specs" / "one.yaml").write_text(SPEC.replace("p90: 1000", "p90: 999"))
    time.sleep(TICK)
    ws = Workspace.open(repo)
    try:
        plan_mod.plan_all(ws, read)
    finally:
        ws.close()
    result, full = _plan(repo, monkeypatch)
    assert full == ["one"]
    assert [v.threshold for v in result.slo if v.name == "latency_ms.p90"] == [999]


def _racy(repo: Path) -> list[str]:
    """The paths the settled cache keeps with a content digest (their next check reads them)."""
    raw = json.loads((repo / ".npuctl" / "cache" / "settled.json").read_text())
    return [w[0] for w in raw["paths"] if len(w) > 2]


def test_the_lock_an_apply_just_wrote_is_read_once_by_the_next_plan_then_only_stat_ed(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 999"))
    time.sleep(TICK)  # the edited spec is past the racy window: settled by the apply
    assert run_npuctl(repo, "apply").returncode == 0  # rewrites the lock, then settles the spec
    lock = str(repo / "specs" / "one.lock.json")
    assert lock in _racy(repo)
    cache = repo / ".npuctl" / "cache" / "settled.json"
    stamp = os.stat(cache).st_mtime_ns
    # one lock against the whole cache file: not worth a rewrite, so the lock stays racy
    monkeypatch.setattr(statcache, "REWRITE_SHARE", os.path.getsize(cache) // os.path.getsize(lock) - 1)
    result, full = _plan(repo, monkeypatch)
    assert full == [] and _actions(result)["verify"] == "cached"
    assert _racy(repo) == [lock] and os.stat(cache).st_mtime_ns == stamp
    # worth it: the plan that reads it again keeps its stat alone, and later plans never read it
    monkeypatch.setattr(statcache, "REWRITE_SHARE", os.path.getsize(cache) // os.path.getsize(lock) + 1)
    again, full = _plan(repo, monkeypatch)
    assert full == [] and again.to_json() == result.to_json() and _racy(repo) == []
    with monkeypatch.context() as m:
        m.setattr(statcache, "content_digest", lambda path: pytest.fail(f"read {path}"))
        third, full = _plan(repo, monkeypatch)
    assert full == [] and third.to_json() == result.to_json()


def test_an_apply_result_is_stored_as_what_differs_from_the_plan_result() -> None:
    """A settled spec's apply result is its plan result less the verify row: stored as the indexes of
    the plan's rows it keeps, it reads back equal, whatever else differs or is missing."""
    from reconciler.engine.settled import ABSENT, _delta, _undelta

    rows = [{"name": s, "action": "cached", "key": s * 8} for s in ("import", "compile", "evaluate")]
    plan = {"name": "d", "stages": [*rows, {"name": "verify", "action": "cached"}], "note": "n", "x": 1}
    apply = {"name": "d", "stages": rows, "note": "built"}
    stored = _delta(plan, apply)
    assert stored == {"stages": [0, 1, 2], "note": "built", ABSENT: ["x"]}
    assert _undelta(plan, stored) == apply
    assert _undelta(plan, _delta(plan, plan)) == plan and _delta(plan, plan) == {}
    reordered = {**plan, "stages": [{"name": "new", "action": "built"}, rows[1]]}
    assert _undelta(plan, _delta(plan, reordered)) == reordered
