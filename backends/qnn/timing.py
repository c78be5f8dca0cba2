"""The HTP simulator's cycle count as an estimated time on the target: cycles at the catalog's HTP clock
(`htp_clock_mhz`, with its basis). Nothing here ran on a device: every figure is `estimated`, and its
detail says what the clock rests on, so a verdict judged on it is at best met on an estimate, never a
pass."""

from __future__ import annotations

from typing import Any

from backends.catalog import Target

EVIDENCE = "estimated: QNN HTP simulator cycles at the catalog HTP clock"
PERCENTILES = ("p50", "p90", "p95", "p99")


def htp_clock_mhz(target: Target) -> float | None:
    clock = target.extra.get("htp_clock_mhz")
    return float(clock) if isinstance(clock, (int, float)) and clock > 0 else None


def latency_estimate(cycles: int, target: Target, simulator: str) -> dict[str, dict[str, Any]]:
    """latency_ms.* from `cycles` simulated accelerator cycles per inference; {} without a clock."""
    clock = htp_clock_mhz(target)
    if clock is None or cycles <= 0:
        return {}
    basis = str((target.extra.get("basis") or {}).get("htp_clock_mhz") or "basis not stated")
    ms = cycles / (clock * 1e6) * 1e3
    detail = (
        f"{simulator}: {cycles} simulated accelerator cycles per inference at {clock:g} MHz "
        f"(catalog htp_clock_mhz of {target.id}; {basis}); an estimate, not a time measured on a "
        "device (the same for every percentile)"
    )
    value: dict[str, Any] = {"value": round(ms, 6), "evidence": EVIDENCE, "detail": detail}
    if basis.startswith("assumed"):
        # an assumed clock makes the milliseconds an assumption: verify gives them no pass and no fail
        value["assumed"] = f"an assumed HTP clock of {clock:g} MHz"
    return {f"latency_ms.{p}": dict(value) for p in PERCENTILES}
