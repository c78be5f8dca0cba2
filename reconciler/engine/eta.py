"""How long a stage will take, from how long it took before: the ledger's durations of the same stage.

The closest history wins: the same spec, variant and stage (its own last builds), else the same stage
for the same target (another spec's compile for rk3588 says more than nothing). The estimate is the
median of the most recent RECENT durations, so one slow outlier does not move it. Stages estimated
under LONG_S get no ETA: a bar that finishes before the reader looks needs none.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.state.db import Database

RECENT = 5
LONG_S = 5.0


@dataclass(frozen=True)
class Past:
    spec: str
    variant: str
    stage: str
    target: str
    duration_s: float


def estimate(history: Sequence[Past], spec: str, variant: str, stage: str, target: str) -> float | None:
    """Seconds the stage is expected to take; None without a previous duration. `history` oldest first."""
    own = [p.duration_s for p in history if (p.spec, p.variant, p.stage) == (spec, variant, stage)]
    similar = own or [p.duration_s for p in history if (p.stage, p.target) == (stage, target)]
    return statistics.median(similar[-RECENT:]) if similar else None


def remaining(expected_s: float | None, elapsed_s: float) -> float | None:
    """Seconds left of a stage expected to take `expected_s` (at least 0: an overrun reads 0, not a
    negative time); None for a stage with no estimate or a short one."""
    if expected_s is None or expected_s < LONG_S:
        return None
    return max(0.0, expected_s - elapsed_s)


def history(db: Database) -> list[Past]:
    """Every built stage's duration, oldest first, with the target its key was built for."""
    rows = db.conn.execute(
        "SELECT l.spec, l.variant, l.stage, COALESCE(json_extract(r.key_inputs, '$.target.id'), ''),"
        " l.duration_ms FROM ledger l LEFT JOIN records r ON r.key = l.key"
        " WHERE l.action = 'built' AND l.duration_ms > 0 ORDER BY l.id"
    ).fetchall()
    return [Past(str(s), str(v), str(st), str(t), float(ms) / 1000) for s, v, st, t, ms in rows]


class Estimator:
    """The run's ETAs: the history read once (the reporter may call from any thread), the targets of
    the specs being applied, and when each stage started."""

    def __init__(self, past: Sequence[Past], targets: dict[str, str]) -> None:
        self.past = list(past)
        self.targets = targets
        self.started: dict[tuple[str, str, str], tuple[float, float | None]] = {}

    @classmethod
    def load(cls, db: Database, specs: Iterable[tuple[str, str]]) -> Estimator:
        """`specs`: (name, target) of each spec being applied."""
        return cls(history(db), dict(specs))

    def start(self, spec: str, variant: str, stage: str) -> float | None:
        """Marks the stage started; returns its expected duration in seconds."""
        expected = estimate(self.past, spec, variant, stage, self.targets.get(spec, ""))
        self.started[(spec, variant, stage)] = (time.monotonic(), expected)
        return expected

    def left(self, spec: str, variant: str, stage: str) -> float | None:
        """Seconds left of a started stage; None when it has no (long) estimate."""
        begun = self.started.get((spec, variant, stage))
        if begun is None:
            return None
        return remaining(begun[1], time.monotonic() - begun[0])
