"""The pull-request comment for humans: unverified is not failed, the spec's own threshold, changed
specs first with the rest folded, a result line."""

from __future__ import annotations

from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.gitops import render, slo
from reconciler.gitops.compare import Comparison, PolicyChange, SpecComparison
from reconciler.state.lockread import LockView


def _verdict(name: str, threshold: float, value: float | None, verdict: Verdict) -> dict[str, Any]:
    return {
        "name": name,
        "variant": "default",
        "threshold": threshold,
        "comparison": "<=",
        "value": value,
        "passed": verdict.passed,
        "evidence": "estimated" if verdict is Verdict.MET_ON_ESTIMATE else "measured:device",
        "verdict": verdict.word,
        "detail": "",
    }


def _lock(*verdicts: dict[str, Any]) -> LockView:
    return LockView.from_json({"variants": {"default": {"verdicts": list(verdicts)}}})


ONE_PASS_REST_UNVERIFIED = _lock(
    _verdict("latency_ms.p90", 150, 120.0, Verdict.PASS),
    _verdict("size_mb", 12, 6.9, Verdict.MET_ON_ESTIMATE),
    _verdict("peak_memory_mb", 64, None, Verdict.UNVERIFIED),
)


def test_specs_with_no_failed_slo_are_not_marked_failed() -> None:
    count = slo.summary(ONE_PASS_REST_UNVERIFIED)
    assert (count.passed, count.total, count.failed, count.unverified) == (1, 3, 0, 2)
    spec = SpecComparison("det", "modified", "specs/det.yaml", applied=True, slo_base=count, slo_now=count)
    cell = render.slo_cell(spec)
    assert Verdict.FAIL.mark not in cell and Verdict.PASS.mark not in cell
    assert cell.count(f"{Verdict.UNVERIFIED.mark} 1/3 passed, 2 {Verdict.UNVERIFIED.word}") == 2, cell


def test_a_failed_slo_is_marked_failed_and_counted() -> None:
    lock = _lock(
        _verdict("latency_ms.p90", 150, 217.252352, Verdict.FAIL), _verdict("size_mb", 12, 6.9, Verdict.PASS)
    )
    text = render.count_text(slo.summary(lock))
    assert text == f"{Verdict.FAIL.mark} 1/2 passed, 1 failed"
    assert render.count_text(slo.summary(_lock(_verdict("size_mb", 12, 6.9, Verdict.PASS)))).startswith(
        Verdict.PASS.mark
    )


def test_the_table_shows_the_specs_threshold_before_apply() -> None:
    base = _lock(_verdict("latency_ms.p90", 150, 120.0, Verdict.PASS))
    bounds = {("default", "latency_ms.p90"): ("<=", 100.0), ("default", "size_mb"): ("<=", 12.0)}
    rows = {r.name: r for r in slo.table(base, None, bounds)}
    assert (rows["latency_ms.p90"].threshold, rows["latency_ms.p90"].old_threshold) == (100.0, 150.0)
    assert render.threshold_text(rows["latency_ms.p90"]) == "<= 100 (was 150)"
    assert rows["size_mb"].threshold == 12.0 and rows["size_mb"].old is None, (
        "an SLO the spec adds has its row"
    )


def test_changed_specs_come_first_and_unchanged_ones_are_folded() -> None:
    specs = [SpecComparison(f"same{i}", "unchanged", f"specs/same{i}.yaml", target="cpu") for i in range(5)]
    specs.insert(3, SpecComparison("edited", "modified", "specs/edited.yaml", target="cpu"))
    md = render.to_markdown(Comparison("origin/main", "0123456789abcdef", specs), 2)
    lines = md.splitlines()
    edited = next(i for i, line in enumerate(lines) if line.startswith("| `edited`"))
    folded = lines.index("<details>")
    assert edited < folded, "the changed spec's row comes before the folded ones"
    assert lines[folded + 1] == "<summary>5 unchanged specs: nothing to rebuild</summary>"
    assert all(i > folded for i, line in enumerate(lines) if line.startswith("| `same"))
    assert sum(1 for line in lines if line.startswith("#### ")) == 1, "details only for the changed spec"
    assert lines[-1] == "**Result**: 6 specs: 1 modified, 5 unchanged · plan: changes pending (exit 2)"


def test_a_policy_change_and_untrusted_records_are_said() -> None:
    spec = SpecComparison("det", "modified", "specs/det.yaml", target="cpu")
    spec.untrusted = ["default: not from a trusted builder (unsigned)"]
    change = PolicyChange(added=["helper (ed25519:AAAAAAAAAAAA…)"])
    md = render.to_markdown(Comparison("origin/main", "0123456789abcdef", [spec], change), 2)
    assert "**⚠️ This change edits the trust policy** (`npuctl-trust.yaml`): adds helper" in md
    assert "- ⚠️ `default: not from a trusted builder (unsigned)`: its verdicts count as unknown" in md
    assert "edits the trust policy" not in render.to_markdown(Comparison("main", "0123456789", [spec]), 2)
