"""The SLO table between two lock files: per variant and SLO, the old and new verdicts and the delta.

Rows come from both sides, so an SLO added or dropped by the change shows up with one side empty.
Thresholds are the new ones when both exist (tightening an SLO re-judges, it does not re-measure).

A latency change is `noise` when it stays within the measurements' own spread: each side's value lies
between the other side's recorded p50 and p99. A p90 moving from 0.03 to 0.3 ms on a run whose p99
was 8 ms is the machine, not the change, and is shown as such rather than as "+890 % worse".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from reconciler.records.judged import Judged
from reconciler.records.measured import Measured
from reconciler.state.lockread import LockView


@dataclass(frozen=True)
class SloRow:
    name: str
    variant: str
    comparison: str
    threshold: float | None
    old_threshold: float | None
    old: float | None
    new: float | None
    old_verdict: str | None
    new_verdict: str | None
    evidence: str | None
    noise: bool = False
    """The change lies within both measurements' p50..p99 spread (latency only)."""

    @property
    def delta(self) -> float | None:
        if self.old is None or self.new is None:
            return None
        return self.new - self.old

    @property
    def relative(self) -> float | None:
        delta = self.delta
        if delta is None or not self.old:
            return None
        return delta / abs(self.old)

    @property
    def better(self) -> bool | None:
        """Whether the value moved the good way (down for <= bounds, up for >=); None when unchanged."""
        delta = self.delta
        if not delta:
            return None
        return delta < 0 if self.comparison == "<=" else delta > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "variant": self.variant,
            "comparison": self.comparison,
            "threshold": self.threshold,
            "old_threshold": self.old_threshold,
            "old": self.old,
            "new": self.new,
            "delta": self.delta,
            "relative": self.relative,
            "old_verdict": self.old_verdict,
            "new_verdict": self.new_verdict,
            "evidence": self.evidence,
            "noise": self.noise,
        }


def verdicts(lock: LockView | None) -> dict[tuple[str, str], Judged]:
    """(variant, SLO name) -> verdict of a lock file."""
    out: dict[tuple[str, str], Judged] = {}
    for variant, data in sorted((lock.variants if lock is not None else {}).items()):
        for verdict in data.verdicts:
            out[(variant, verdict.name)] = verdict
    return out


def _value(measured: Measured | Judged | None) -> float | None:
    return None if measured is None or measured.value is None else float(measured.value)


def _spread(lock: LockView | None, variant: str) -> tuple[float, float] | None:
    measured = lock.variant(variant).measurements if lock is not None else {}
    low, high = _value(measured.get("latency_ms.p50")), _value(measured.get("latency_ms.p99"))
    return (low, high) if low is not None and high is not None and low <= high else None


def is_noise(
    name: str,
    old: float | None,
    new: float | None,
    old_spread: tuple[float, float] | None,
    new_spread: tuple[float, float] | None,
) -> bool:
    """Each value within the other measurement's p50..p99: the two runs cannot be told apart."""
    if not name.startswith("latency_ms.") or old is None or new is None or old == new:
        return False
    if old_spread is None or new_spread is None:
        return False
    return old_spread[0] <= new <= old_spread[1] and new_spread[0] <= old <= new_spread[1]


def table(
    old_lock: LockView | None,
    new_lock: LockView | None,
    bounds: dict[tuple[str, str], tuple[str, float]] | None = None,
) -> list[SloRow]:
    """The rows, base -> now. `bounds` ((variant, SLO) -> (comparison, threshold)) are the spec's own
    SLOs as it is now: a row's threshold is the spec's even before the lock is applied (a tightened
    bound shows as the new one, the base's as "was"), and an SLO the spec adds has its row."""
    old, new, bounds = verdicts(old_lock), verdicts(new_lock), bounds or {}
    rows = []
    for variant, name in sorted(set(old) | set(new) | set(bounds), key=lambda k: (k[0] != "default", k)):
        before, after = old.get((variant, name)), new.get((variant, name))
        either = after or before
        comparison, threshold = bounds.get(
            (variant, name),
            ((either.comparison if either else "") or "<=", float(after.threshold) if after else None),
        )
        old_value, new_value = _value(before), _value(after)
        spreads = _spread(old_lock, variant), _spread(new_lock, variant)
        rows.append(
            SloRow(
                name=name,
                variant=variant,
                comparison=comparison,
                threshold=threshold,
                old_threshold=float(before.threshold) if before else None,
                old=old_value,
                new=new_value,
                old_verdict=before.verdict if before else None,
                new_verdict=after.verdict if after else None,
                evidence=either.evidence if either else None,
                noise=is_noise(name, old_value, new_value, *spreads),
            )
        )
    return rows


class SloCount(NamedTuple):
    """A lock file's SLOs over every variant: passed on a measurement, failed, and set. The rest
    (set, neither passed nor failed) are unverified: met or missed only on an estimate, a host CPU or
    an assumption, or not measured; they fail nothing."""

    passed: int
    total: int
    failed: int = 0

    @property
    def unverified(self) -> int:
        return self.total - self.passed - self.failed


def summary(lock: LockView | None) -> SloCount:
    entries = list(verdicts(lock).values())
    return SloCount(
        sum(1 for v in entries if v.passed is True),
        len(entries),
        sum(1 for v in entries if v.passed is False),
    )
