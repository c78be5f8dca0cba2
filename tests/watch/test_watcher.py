"""The watch loop with real files, real watchdog events and real `npuctl apply` subprocesses."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from reconciler.engine.results import SpecResult, StageResult
from reconciler.state.db import Database
from reconciler.watch import WatchOptions
from reconciler.watch.runner import JobResult
from tests.watch.conftest import CountingRunner, set_runs


def _evaluate_builds(repo: Path) -> list[dict]:
    db = Database(repo / ".npuctl" / "state.db")
    try:
        return [e for e in db.ledger("digits") if e["stage"] == "evaluate" and e["action"] == "built"]
    finally:
        db.close()


def _record_runs(repo: Path, key: str) -> int:
    db = Database(repo / ".npuctl" / "state.db")
    try:
        record = db.record(key)
        assert record is not None
        return int(record.key_inputs["fields"]["evaluate"]["runs"])
    finally:
        db.close()


def test_up_to_date_specs_are_not_applied_at_start(applied_repo: Path, watch) -> None:
    harness = watch(applied_repo)
    assert harness.watcher.runner.started == []
    assert harness.board.lines["digits"].state == "Healthy"
    assert "2/2 SLOs met" in harness.board.lines["digits"].detail


def test_no_initial_indexes_inputs_but_acts_only_on_changes(digits_repo: Path, watch) -> None:
    harness = watch(digits_repo, options=WatchOptions(debounce_s=0.2, initial=False))
    assert harness.board.lines["digits"].state == "watching"
    assert harness.events("plan") == [] and harness.watcher.runner.started == []
    labels = digits_repo / "data" / "eval" / "labels.txt"
    labels.write_text(labels.read_text())  # a data file, not the spec: found through the index
    harness.wait_event("finished", timeout=120)
    assert len(harness.watcher.runner.started) == 1
    assert harness.board.lines["digits"].state == "Healthy"


def test_five_saves_within_200ms_give_exactly_one_rebuild(applied_repo: Path, watch) -> None:
    spec = applied_repo / "specs" / "digits.yaml"
    before = len(_evaluate_builds(applied_repo))
    # a quiet window far above the 30 ms gaps: a loaded machine cannot stretch a gap past it
    harness = watch(applied_repo, options=WatchOptions(debounce_s=1.0, retry_base_s=0.2))
    for runs in range(6, 11):  # 5 saves within about 150 ms
        set_runs(spec, runs)
        time.sleep(0.03)
    harness.wait_event("finished", timeout=120)
    harness.quiet(1.0)
    assert len(harness.watcher.runner.started) == 1
    assert len(harness.replans()) == 1
    builds = _evaluate_builds(applied_repo)[before:]
    assert len(builds) == 1, builds
    assert _record_runs(applied_repo, builds[0]["key"]) == 10
    assert harness.board.lines["digits"].state == "Healthy"


def test_editor_write_temp_then_rename_counts_once(applied_repo: Path, watch) -> None:
    spec = applied_repo / "specs" / "digits.yaml"
    harness = watch(applied_repo)
    backup = spec.with_name("digits.yaml~")
    temp = spec.with_name(".digits.yaml.swx")
    os.link(spec, backup)  # vim-style: keep a backup, write a temp file, rename it over the original
    temp.write_text(spec.read_text().replace("runs: 5", "runs: 6"))
    os.replace(temp, spec)
    backup.unlink()
    harness.wait_event("finished", timeout=120)
    harness.quiet(1.0)
    assert len(harness.watcher.runner.started) == 1
    assert len(harness.replans()) == 1


def test_a_bad_save_shows_the_error_and_waits_for_the_next_save(applied_repo: Path, watch) -> None:
    spec = applied_repo / "specs" / "digits.yaml"
    good = spec.read_text()
    harness = watch(applied_repo)
    spec.write_text(good.replace("runs: 5", "runs: [oops"))
    _, _, detail = harness.wait_state("invalid")
    assert re.search(r"digits\.yaml:\d+:\d+: ", detail), detail
    assert len(detail.splitlines()) == 1
    harness.quiet(1.0)
    assert harness.watcher.runner.started == [], "an invalid spec is terminal: never applied"
    spec.write_text(good.replace("runs: 5", "runs: 0"))  # schema-invalid now: still terminal
    harness.wait(lambda: "runs" in harness.board.lines["digits"].detail, 30, "schema error on runs")
    assert harness.board.lines["digits"].state == "invalid"
    mark = len(harness.board.history)
    spec.write_text(good.replace("runs: 5", "runs: 6"))
    harness.wait_state("Healthy", after=mark, timeout=120)
    assert len(harness.watcher.runner.started) == 1


def test_a_model_change_reapplies_the_specs_reading_it(applied_repo: Path, watch) -> None:
    harness = watch(applied_repo)
    model = applied_repo / "models" / "digits.onnx"
    model.write_bytes(model.read_bytes())  # same bytes, new mtime: re-hashed, planned, nothing to build
    harness.wait(lambda: len(harness.replans()) == 1, 30, "a re-plan")
    harness.quiet(0.8)
    assert harness.watcher.runner.started == []
    labels = applied_repo / "data" / "eval" / "labels.txt"
    name, label = labels.read_text().splitlines()[0].split()
    wrong = (int(label) + 1) % 10
    labels.write_text(labels.read_text().replace(f"{name} {label}", f"{name} {wrong}", 1))
    harness.wait_event("finished", timeout=120)
    assert len(harness.watcher.runner.started) == 1
    assert harness.board.lines["digits"].state == "Healthy"


def test_a_new_spec_file_is_picked_up_and_a_deleted_one_dropped(applied_repo: Path, watch) -> None:
    harness = watch(applied_repo)
    other = applied_repo / "specs" / "other.yaml"
    other.write_text(
        (applied_repo / "specs" / "digits.yaml").read_text().replace("name: digits", "name: other")
    )
    harness.wait(lambda: "other" in harness.board.lines, 30, "the new spec")
    harness.wait(lambda: harness.board.lines["other"].state == "Healthy", 120, "other applied")
    (applied_repo / "specs" / "base.yaml").write_text(
        "apiVersion: npuctl/v1\nkind: DeploymentBase\nspec: {}\n"
    )
    other.unlink()
    harness.wait(lambda: "other" not in harness.board.lines, 30, "the deleted spec dropped")
    harness.quiet(0.8)
    assert not any("base" in line for line in harness.board.lines)


class ScriptedJob:
    def __init__(self, spec_file: Path, result: JobResult) -> None:
        self.spec_file = spec_file
        self.result = result

    def poll(self) -> JobResult:
        return self.result

    def cancel(self) -> None:
        pass


class FailingRunner:
    """Answers like an apply whose stage failed (transient) or that crashed, without running one."""

    def __init__(self, status: str | None) -> None:
        self.status = status
        self.started: list[Path] = []

    def start(self, spec_file: Path) -> ScriptedJob:
        self.started.append(spec_file)
        if self.status is None:
            return ScriptedJob(spec_file, JobResult(1, None, "Traceback ...\nMemoryError: boom\n"))
        result = SpecResult("digits", str(spec_file), "cpu", status=self.status)
        result.stages = [StageResult("evaluate", "default", "failed", None, "runner lost")]
        return ScriptedJob(spec_file, JobResult(1, {"specs": [result.to_json()]}, ""))


def test_transient_failures_back_off_and_terminal_ones_wait(digits_repo: Path, watch) -> None:
    runner = FailingRunner("Failed")
    options = WatchOptions(debounce_s=0.2, retry_base_s=0.3, retry_cap_s=0.6)
    harness = watch(digits_repo, runner=CountingRunner(runner), options=options)
    harness.wait(lambda: len(harness.events("retry")) >= 3, 10, "three failed attempts")
    retries = harness.events("retry")
    assert [r["delay"] for r in retries[:3]] == [0.3, 0.6, 0.6]
    assert "runner lost" in retries[0]["reason"]
    assert harness.board.lines["digits"].state in ("failed", "building")
    runner.status = "Stalled"  # a terminal failure: no more retries
    harness.wait(lambda: harness.board.lines["digits"].state == "stalled", 10, "stalled")
    count = len(runner.started)
    harness.quiet(1.5)
    assert len(runner.started) == count


def test_a_crashed_apply_is_transient(digits_repo: Path, watch) -> None:
    runner = FailingRunner(None)
    harness = watch(digits_repo, runner=runner, options=WatchOptions(debounce_s=0.2, retry_base_s=5))
    harness.wait_event("retry", timeout=10)
    assert "MemoryError: boom" in harness.board.lines["digits"].detail
    assert harness.board.lines["digits"].state == "failed"
