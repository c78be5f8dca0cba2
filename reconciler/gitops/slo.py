"""The SLO table between two lock files: per variant and SLO, the old and new verdicts and the delta.

Rows come from both sides, so an SLO added or dropped by the change shows up with one side empty.
Thresholds are the new ones when both exist (tightening an SLO re-judges, it does not re-measure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
        }


def verdicts(lock: dict[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """(variant, SLO name) -> verdict entry of a lock file."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for variant, data in sorted(((lock or {}).get("variants") or {}).items()):
        for verdict in data.get("verdicts") or []:
            out[(variant, str(verdict.get("name")))] = verdict
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def table(old_lock: dict[str, Any] | None, new_lock: dict[str, Any] | None) -> list[SloRow]:
    old, new = verdicts(old_lock), verdicts(new_lock)
    rows = []
    for variant, name in sorted(set(old) | set(new), key=lambda k: (k[0] != "default", k)):
        before, after = old.get((variant, name)), new.get((variant, name))
        either = after or before or {}
        rows.append(
            SloRow(
                name=name,
                variant=variant,
                comparison=str(either.get("comparison", "<=")),
                threshold=_number((after or {}).get("threshold")),
                old_threshold=_number((before or {}).get("threshold")),
                old=_number((before or {}).get("value")),
                new=_number((after or {}).get("value")),
                old_verdict=(before or {}).get("verdict"),
                new_verdict=(after or {}).get("verdict"),
                evidence=(after or before or {}).get("evidence"),
            )
        )
    return rows


def summary(lock: dict[str, Any] | None) -> tuple[int, int]:
    """(SLOs passed on a measurement, SLOs set) over every variant of a lock file."""
    entries = list(verdicts(lock).values())
    return sum(1 for v in entries if v.get("passed") is True), len(entries)
