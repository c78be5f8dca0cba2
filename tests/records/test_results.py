"""What the engine prints and records agrees with the records: every verdict judge() can give, as the
lock stores it and as --json prints it, and a spec's result row, validate against the models and dump
back to the same JSON."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from backends.sdk.vocab import Verdict
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.verify import judge
from reconciler.records.measured import measurements as read_measurements
from reconciler.records.results import ApplyOutput, ApplyStage, PlanStage, SpecRow
from reconciler.records.verdict import VerdictRecord

SLO: dict[str, Any] = {
    "latency_ms": {"p50": 10.0, "p90": 10.0, "p95": 10.0, "p99": 10.0, "mean": 10.0},
    "accuracy": {"min": 0.9},
    "size_mb": 1,
    "peak_memory_mb": 5.0,
    "npu_coverage": 0.5,
}

MEASUREMENTS: dict[str, dict[str, Any]] = {
    "latency_ms.p50": {"value": 4.0, "evidence": "measured:device", "detail": "d"},
    "latency_ms.p90": {"value": 40.0, "evidence": "measured:host", "on_target": False, "host": "x86"},
    "latency_ms.p95": {"value": 4, "evidence": "measured:host", "assumed": "a 1 GHz clock"},
    "latency_ms.estimate": {"value": 12.5, "evidence": "estimated: vela"},
    "accuracy": {"value": 0.5, "evidence": "measured:host simulator"},
    "size_mb": {"value": None, "evidence": "not measured", "detail": "the vendor tool did not run"},
    "npu_coverage": {"value": None, "evidence": "estimated", "verdict": "unknown", "detail": "uncounted ops"},
}


def _judged() -> list[Any]:
    verdicts = judge(SLO, read_measurements(MEASUREMENTS), "default")
    verdicts[0].carried_over = True
    verdicts[1].predicted = "pass -> fail"
    return verdicts


def test_the_synthetic_slos_reach_most_verdict_words() -> None:
    words = {v.verdict for v in _judged()}
    assert len(words) >= 6, words
    assert words <= {v.word for v in Verdict}


@pytest.mark.parametrize("form", ["lock_json", "to_json"])
def test_every_verdict_validates_and_dumps_back_unchanged(form: str) -> None:
    for verdict in _judged():
        data = getattr(verdict, form)()
        assert VerdictRecord.model_validate(data).dump() == data


def test_a_verdict_the_records_forbid_is_rejected() -> None:
    data = _judged()[0].lock_json()
    for bad in ({"verdict": "passed"}, {"comparison": "<"}, {"evidence": "guessed"}, {"threshold": "1"}):
        with pytest.raises(ValidationError):
            VerdictRecord.model_validate({**data, **bad})


def _result(*actions: str) -> SpecResult:
    result = SpecResult("digits", "specs/digits.yaml", "cpu")
    names = ["import", "check", "compile", "verify"]
    for name, action in zip(names, actions, strict=False):
        result.stages.append(StageResult(name, "default", action, "ab" * 32, "why", duration_ms=1.5))
    result.stages.append(StageResult("evaluate", "default", actions[0], None, "no key yet", log="x.log"))
    result.slo = _judged()
    result.measurements = {"default": MEASUREMENTS}
    result.carried_over = ["default/compile: built elsewhere"]
    return result


def test_an_apply_row_validates_and_dumps_back_unchanged() -> None:
    row = _result("built", "cached", "failed", "skipped").to_json()
    assert SpecRow[ApplyStage].model_validate(row).dump() == row
    payload = {"format_version": 1, "command": "apply", "specs": [row]}
    assert ApplyOutput.model_validate(payload).dump() == payload


def test_a_stage_action_belongs_to_its_command() -> None:
    SpecRow[PlanStage].model_validate(_result("build", "cached", "rejudge", "stalled").to_json())
    with pytest.raises(ValidationError):
        SpecRow[PlanStage].model_validate(_result("built").to_json())
    with pytest.raises(ValidationError):
        SpecRow[ApplyStage].model_validate({**_result("built").to_json(), "stages": [{"name": "compil"}]})
