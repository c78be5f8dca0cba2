"""plan/apply output for humans: SLO figures against their bound, identity stages, a result line."""

from __future__ import annotations

from backends.sdk.vocab import Verdict
from reconciler.cli._render import render
from reconciler.engine.results import SpecResult, StageResult
from reconciler.output import number
from reconciler.records.judged import Judged

P90 = 217.252352


def _result() -> SpecResult:
    stages = [
        StageResult("import", "default", "cached", "k1", "up to date"),
        StageResult("rewrite", "default", "build", None, "rewrite.replace_unsupported is off", identity=True),
        StageResult("compile", "default", "build", None, "after import rebuilds"),
    ]
    slo = [
        Judged("latency_ms.p90", "default", 150.0, "<=", P90, False, "measured:device", Verdict.FAIL.word),
        Judged("npu_coverage", "default", 0.9, ">=", None, None, None, Verdict.UNVERIFIED.word),
    ]
    return SpecResult("det", "specs/det.yaml", "rk3588", stages, slo, "Degraded", "OutOfSync", "Degraded")


def test_a_failed_slo_reads_value_relation_threshold_and_unit() -> None:
    for fmt in ("text", "markdown"):
        shown = render([_result()], fmt, "plan")
        assert f"{number(P90)} > 150 ms" in shown, fmt
        assert str(P90) not in shown and "<= 150.0" not in shown, fmt


def test_an_idle_stage_reads_as_identity_not_build() -> None:
    for fmt in ("text", "markdown"):
        rows = [line for line in render([_result()], fmt, "plan").splitlines() if "rewrite" in line]
        assert rows and all("identity" in row and "build" not in row.split() for row in rows), (fmt, rows)


def test_the_markdown_ends_with_a_result_line_counting_states_stages_and_verdicts() -> None:
    last = render([_result()], "markdown", "apply").rstrip().splitlines()[-1]
    assert last.startswith("**Result**: apply: 1 spec(s) (1 Degraded)")
    assert "stages: 1 build, 1 cached, 1 identity" in last
    assert f"SLOs: 1 {Verdict.FAIL.word}, 1 {Verdict.UNVERIFIED.word}" in last
