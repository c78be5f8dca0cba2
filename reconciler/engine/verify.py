"""Judging SLOs on recorded measurements. Never builds, never measures: thresholds are in no key.

The verdict follows the weakest evidence the figure rests on (backends.sdk.vocab.Verdict names each):
a latency bound with no measurement falls back to the cost-model estimate, and says so, so a bound
met only on an estimate is never a plain pass. A measurement marked `on_target: false` (an NPU
target's latency timed on a CPU) is evidence about that CPU, and one marked `assumed` (milliseconds
from an assumed clock) rests on an assumption: met or missed, neither passes nor fails. A measurement
recorded with no value (an estimate that could not bound the work, a bundle whose vendor tool did not
run) gives no verdict, with its reason.
"""

from __future__ import annotations

from typing import Any

from backends.sdk.vocab import Evidence, Verdict
from reconciler.records.judged import Judged
from reconciler.records.measured import Measured, Measurements, Number

_AT_MOST = "<="
SLACK = 1e-9
"""A value within this of its threshold meets it: float rounding, far below any figure's resolution
(1.0 - 0.995 is 0.0050000000000000044, the 0.005 it reads as; the auto search rounds the same way,
backends.passes.quant.sensitivity.drop_of). The recorded value stays as computed."""
_AT_LEAST = ">="


def meets(value: float, comparison: str, threshold: float) -> bool:
    """Whether `value` meets the bound `comparison threshold` (`<=` or `>=`), within SLACK."""
    return value <= threshold + SLACK if comparison == _AT_MOST else value >= threshold - SLACK


def _pick(measurements: Measurements, *names: str) -> Measured | None:
    """The first of `names` with a value; else the first recorded without one (it says why)."""
    for name in names:
        if name in measurements and measurements[name].value is not None:
            return measurements[name]
    return next((measurements[n] for n in names if n in measurements), None)


def _verdict(
    name: str,
    variant: str,
    threshold: Number,
    comparison: str,
    measured: Measured | None,
    value: Number | None = None,
) -> Judged:
    if measured is None or measured.value is None:
        why = measured.detail if measured is not None and measured.detail else "no measurement"
        word = measured.verdict if measured is not None and measured.verdict else Verdict.UNVERIFIED.word
        evidence = (measured.evidence or None) if measured is not None else None
        return Judged(name, variant, threshold, comparison, None, None, evidence, word, why)
    value = measured.value if value is None else value
    met = meets(value, comparison, threshold)
    verdict, detail = _outcome(measured, met)
    return Judged(
        name, variant, threshold, comparison, value, verdict.passed, measured.evidence, verdict.word, detail
    )


def _outcome(measured: Measured, met: bool) -> tuple[Verdict, str]:
    """The verdict on a measured value, by the evidence it rests on, and its detail."""
    detail = measured.detail or ""
    if measured.on_target is False:
        host = measured.host or "a host CPU"
        verdict = Verdict.MET_ON_HOST if met else Verdict.MISSED_ON_HOST
        return verdict, f"evidence about {host}, not the target: {detail}"
    if measured.assumed:
        verdict = Verdict.MET_ON_ASSUMPTION if met else Verdict.MISSED_ON_ASSUMPTION
        return verdict, f"rests on {measured.assumed}: {detail}"
    if Evidence.parse(measured.evidence).is_estimate:
        return (Verdict.MET_ON_ESTIMATE if met else Verdict.FAIL_ESTIMATED), detail
    return (Verdict.PASS if met else Verdict.FAIL), detail


def _accuracy_drop(measurements: Measurements, relative: bool) -> tuple[Measured | None, float | None]:
    accuracy = _pick(measurements, "accuracy")
    reference = _pick(measurements, "accuracy.reference")
    if accuracy is None or reference is None or accuracy.value is None or reference.value is None:
        return None, None
    drop = float(reference.value) - float(accuracy.value)
    if relative:
        drop = drop / float(reference.value) if reference.value else float("inf")
    return accuracy, max(drop, 0.0)


def judge(slo: dict[str, Any] | None, measurements: Measurements, variant: str) -> list[Judged]:
    """One verdict per SLO the spec sets, in a stable order."""
    if not slo:
        return []
    out: list[Judged] = []
    for pct, bound in sorted((slo.get("latency_ms") or {}).items()):
        if bound is not None:
            measured = _pick(measurements, f"latency_ms.{pct}", "latency_ms.estimate")
            out.append(_verdict(f"latency_ms.{pct}", variant, bound, _AT_MOST, measured))
    accuracy = slo.get("accuracy") or {}
    if accuracy.get("min") is not None:
        out.append(
            _verdict("accuracy.min", variant, accuracy["min"], _AT_LEAST, _pick(measurements, "accuracy"))
        )
    if accuracy.get("max_drop") is not None:
        measured, drop = _accuracy_drop(measurements, bool(accuracy.get("relative")))
        out.append(_verdict("accuracy.max_drop", variant, accuracy["max_drop"], _AT_MOST, measured, drop))
    simple = (
        ("size_mb", "size_mb", _AT_MOST),
        ("peak_memory_mb", "peak_memory_mb", _AT_MOST),
        ("npu_coverage", "npu_coverage", _AT_LEAST),
        ("max_fallback_partitions", "fallback_partitions", _AT_MOST),
    )
    for name, measurement, comparison in simple:
        if slo.get(name) is not None:
            out.append(_verdict(name, variant, slo[name], comparison, _pick(measurements, measurement)))
    return out


def not_trusted(slo: dict[str, Any] | None, variant: str, why: str) -> list[Judged]:
    """One `unknown` verdict per SLO, for a variant whose recorded measurements are not from a
    trusted builder (reconciler.trust): what they claim is no evidence, so no value is shown."""
    out = []
    for verdict in judge(slo, {}, variant):
        verdict.verdict, verdict.detail, verdict.evidence = Verdict.UNKNOWN.word, why, None
        out.append(verdict)
    return out
