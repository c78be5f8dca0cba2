"""Noise-aware SLO deltas: a latency change within the measurements' own spread reads as noise."""

from __future__ import annotations

from reconciler.gitops import render, slo
from reconciler.state.lockread import LockView


def _lock(p50: float, p90: float, p99: float) -> LockView:
    measurements = {
        f"latency_ms.{k}": {"value": v, "evidence": "measured:host"}
        for k, v in (("p50", p50), ("p90", p90), ("p99", p99))
    }
    verdict = {
        "name": "latency_ms.p90",
        "variant": "default",
        "threshold": 5.0,
        "comparison": "<=",
        "value": p90,
        "passed": p90 <= 5.0,
        "evidence": "measured:host",
        "verdict": "pass" if p90 <= 5.0 else "fail",
        "detail": "",
    }
    return LockView.from_json(
        {"variants": {"default": {"measurements": measurements, "verdicts": [verdict]}}}
    )


def test_a_change_inside_both_spreads_is_noise() -> None:
    # +890 %: 0.033 -> 0.327 ms, but the base run's p99 was 8.35 ms and the new run's p50 is 0.02 ms
    [row] = slo.table(_lock(0.0165, 0.033, 8.35), _lock(0.02, 0.327, 0.9))
    assert round(row.relative or 0, 2) == round((0.327 - 0.033) / 0.033, 2)
    assert row.noise is True
    text = render.delta_text(row)
    assert "noise" in text and "worse" not in text and "%" not in text
    assert row.to_json()["noise"] is True


def test_a_change_beyond_the_spread_is_a_regression() -> None:
    [row] = slo.table(_lock(0.0165, 0.033, 0.05), _lock(0.3, 0.327, 0.4))
    assert row.noise is False
    assert "worse" in render.delta_text(row)
