from __future__ import annotations

from reconciler.engine.verify import judge
from reconciler.records.measured import measurements as read_measurements

MEASURED = {
    "latency_ms.p90": {"value": 12.0, "evidence": "measured:host", "detail": "ort"},
    "latency_ms.estimate": {"value": 3.0, "evidence": "estimated", "detail": "roofline"},
    "accuracy": {"value": 0.95, "evidence": "measured:host"},
    "accuracy.reference": {"value": 0.97, "evidence": "measured:host"},
    "size_mb": {"value": 4.0, "evidence": "measured:host"},
    "npu_coverage": {"value": 0.8, "evidence": "estimated"},
}


def _by_name(slo: dict, measurements: dict) -> dict:
    return {v.name: v for v in judge(slo, read_measurements(measurements), "default")}


def test_measured_pass_and_fail() -> None:
    v = _by_name({"latency_ms": {"p90": 20}, "size_mb": 3}, MEASURED)
    assert v["latency_ms.p90"].passed is True and v["latency_ms.p90"].verdict == "pass"
    assert v["size_mb"].passed is False and v["size_mb"].value == 4.0


def test_estimate_is_never_a_plain_pass() -> None:
    v = _by_name({"latency_ms": {"p50": 5}, "npu_coverage": 0.5}, MEASURED)
    assert v["latency_ms.p50"].passed is None
    assert v["latency_ms.p50"].verdict == "met on estimate"
    assert v["latency_ms.p50"].evidence == "estimated"
    assert v["npu_coverage"].passed is None


def test_failing_estimate_fails() -> None:
    v = _by_name({"latency_ms": {"p50": 1}}, MEASURED)
    assert v["latency_ms.p50"].passed is False
    assert v["latency_ms.p50"].verdict == "fail (estimated)"


def test_missing_measurement_is_unverified() -> None:
    v = _by_name({"peak_memory_mb": 100}, MEASURED)
    assert v["peak_memory_mb"].passed is None and v["peak_memory_mb"].verdict == "unverified"


def test_accuracy_drop_absolute_and_relative() -> None:
    absolute = _by_name({"accuracy": {"max_drop": 0.01}}, MEASURED)["accuracy.max_drop"]
    assert abs(absolute.value - 0.02) < 1e-9 and absolute.passed is False
    relative = _by_name({"accuracy": {"max_drop": 0.03, "relative": True}}, MEASURED)["accuracy.max_drop"]
    assert abs(relative.value - 0.02 / 0.97) < 1e-9 and relative.passed is True


def test_no_slo_no_verdicts() -> None:
    assert judge(None, read_measurements(MEASURED), "default") == []
    assert judge({"latency_ms": None}, read_measurements(MEASURED), "default") == []


def test_a_figure_resting_on_an_assumption_neither_passes_nor_fails() -> None:
    """milliseconds from an assumed clock (the HTP's): whichever side of the bound, no pass and no fail."""
    assumed = {
        "latency_ms.p90": {
            "value": 4.0,
            "evidence": "estimated: QNN HTP simulator cycles at the catalog HTP clock",
            "detail": "4000000 cycles at 1000 MHz",
            "assumed": "an assumed HTP clock of 1000 MHz",
        }
    }
    for bound, word in ((10, "met on an assumption"), (1, "missed on an assumption")):
        v = _by_name({"latency_ms": {"p90": bound}}, assumed)["latency_ms.p90"]
        assert v.passed is None and v.verdict == word, v
        assert "an assumed HTP clock of 1000 MHz" in v.detail


def test_a_drop_equal_to_the_budget_meets_it() -> None:
    """1.0 - 0.995 is 0.0050000000000000044 in floating point: the verdict reads the 0.005 it is."""
    measured = {
        "accuracy": {"value": 0.995, "evidence": "measured:host"},
        "accuracy.reference": {"value": 1.0, "evidence": "measured:host"},
    }
    verdict = _by_name({"accuracy": {"max_drop": 0.005}}, measured)["accuracy.max_drop"]
    assert verdict.value == 1.0 - 0.995 and verdict.passed is True  # recorded as computed, judged as read
    assert _by_name({"accuracy": {"max_drop": 0.0049}}, measured)["accuracy.max_drop"].passed is False
