"""The catalog's HTP clock (`htp_clock_mhz`, with its basis), at which the simulator's per-op cycles are
shown as milliseconds in the profile. No latency SLO is judged on those cycles: on x86 the HTP is
emulated and the count follows the host's time (backends.qnn.evaluate)."""

from __future__ import annotations

from backends.catalog import Target


def htp_clock_mhz(target: Target) -> float | None:
    clock = target.extra.get("htp_clock_mhz")
    return float(clock) if isinstance(clock, (int, float)) and clock > 0 else None
