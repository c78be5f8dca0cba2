"""Plan's predicted verdicts: the spec's thresholds applied to the measurements already recorded.

A verdict whose outcome differs from the one the lock records says so ("pass -> fail"); `regressions`
lists the SLOs a CI gate (`plan --fail-on-regression`) refuses: one that passed and would no longer
pass, or a new SLO that would fail.
"""

from __future__ import annotations

from backends.sdk.vocab import Verdict
from reconciler.engine.results import SpecResult
from reconciler.records.judged import Judged


def predict(verdicts: list[Judged], recorded: list[Judged]) -> None:
    """Sets `predicted` on each verdict whose outcome or threshold differs from the recorded one."""
    by_name = {(v.name, v.variant): v for v in recorded}
    for verdict in verdicts:
        before = by_name.get((verdict.name, verdict.variant))
        if before is None:
            verdict.predicted = f"new -> {verdict.verdict}"
        elif before.verdict != verdict.verdict:
            verdict.predicted = f"{before.verdict} -> {verdict.verdict}"
        elif before.threshold != verdict.threshold:
            verdict.predicted = f"{verdict.verdict} (threshold {before.threshold} -> {verdict.threshold})"


def _regressed(verdict: Judged) -> bool:
    if verdict.predicted is None:
        return False
    before = verdict.predicted.split(" -> ")[0]
    if before == "new":
        return verdict.passed is False
    was = Verdict.of(before)
    if was is Verdict.PASS:
        return verdict.passed is not True
    return was is not Verdict.FAIL and verdict.passed is False


def regressions(results: list[SpecResult]) -> list[str]:
    """`spec variant/slo: pass -> fail` for every SLO the plan predicts to regress."""
    return [f"{r.name} {v.variant}/{v.name}: {v.predicted}" for r in results for v in r.slo if _regressed(v)]
