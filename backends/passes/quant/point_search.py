"""The auto search's first phase: every quantization point (activation Q/DQ pair, weight), ordered
by its cheap signal, confirmed by the task metric.

Candidates are taken in cheap order (worst rounding SQNR first) a window at a time; each is measured
with the task metric on the search samples with that point (and those already kept) left float, the
best improving one is kept, the ones that did not improve are dropped. The phase stops when the budget
holds, `max_points` are kept, or PATIENCE windows in a row improve nothing. Measuring a candidate is
a graph edit of one build (no re-quantization). With a screen (the search set's first samples), the
window is compared on the screen and only its best is re-measured on the full set before it is kept.

When single points stall (damage spread over many points, none alone visible in the task metric: an
LSTM OCR recognizer loses 0.12 string agreement over 78 activations, no one of which recovers a
string), a bulk step keeps the next worst points of the cheap order as one group, doubling its size
(2, 4, 8, ...) up to the points left, each group measured on the full set: the smallest that meets
the budget is kept. A group that only improves is not: it would spend the room the layer phase needs
(on a YOLOX detector, 7 bulk points left no room for the 3 layers that meet the budget). The kept
group is then pruned: each of its points is tried quantized again, and stays int8 while the budget
holds (a doubling group carries passengers, and every float point costs latency).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.passes.quant.points import Point, Signal
from backends.passes.quant.sensitivity import Score, Scorer, drop_of

WINDOW = 3
PATIENCE = 2
MIN_GAIN = 1e-6


@dataclass
class Trial:
    point: Point
    kept_before: int
    accuracy: float
    sqnr_db: float
    samples: int
    """Samples the trial was scored on (the screen's, or the full search set's)."""


@dataclass
class PointSearch:
    score: Score
    chosen: list[Point] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    budget_met: bool = False
    best_group: tuple[list[Point], Score] | None = None
    """The bulk step's best-scoring group when none met the budget (not kept: see _bulk); the search
    falls back to it when the layer phase ends below it."""


def search(
    ordered: Sequence[Signal],
    materialize: Callable[[Sequence[Point]], bytes],
    scorer: Scorer,
    base: Score,
    max_drop: float,
    max_points: int,
    scratch: Path,
    log: Callable[[str], None] = print,
    screen: Scorer | None = None,
) -> PointSearch:
    """`screen` (the first samples of `scorer`'s): candidates are compared on it, and only the best
    of a window is re-measured on the full set before it is kept, so a window costs WINDOW screen
    runs and one full run instead of WINDOW full runs."""
    out = PointSearch(score=base)
    reference = scorer.reference_accuracy
    pending = [s.point for s in ordered]
    judge = screen if screen is not None else scorer
    idle = 0
    with tempfile.TemporaryDirectory(dir=scratch, prefix="points-") as tmp:
        path = Path(tmp) / "candidate.onnx"
        current = base
        if screen is not None and drop_of(reference, base.accuracy) > max_drop:
            path.write_bytes(materialize([]))
            current = screen(path)
        while drop_of(reference, out.score.accuracy) > max_drop and len(out.chosen) < max_points and pending:
            window, best = pending[:WINDOW], None
            for point in window:
                path.write_bytes(materialize([*out.chosen, point]))
                got = judge(path)
                out.trials.append(
                    Trial(point, len(out.chosen), got.accuracy, got.sqnr_db, len(judge.samples))
                )
                log(
                    f"  point {point.label} ({point.producer}) float -> {judge.metric} "
                    f"{got.accuracy:.4f} on {len(judge.samples)} samples, sqnr {got.sqnr_db:.2f} dB"
                )
                if best is None or got.accuracy > best[1].accuracy:
                    best = (point, got)
            improving = [
                t.point for t in out.trials[-len(window) :] if t.accuracy > current.accuracy + MIN_GAIN
            ]
            pending = [p for p in pending if p not in window or p in improving]
            full = None
            if best is not None and best[0] in improving:
                full = best[1]
                if screen is not None:
                    path.write_bytes(materialize([*out.chosen, best[0]]))
                    full = scorer(path)
                    log(
                        f"  confirm {best[0].label}: {scorer.metric} {full.accuracy:.4f} on {len(scorer.samples)}"
                    )
                    if full.accuracy <= out.score.accuracy + MIN_GAIN:
                        pending.remove(best[0])  # the screen's gain did not hold on the full set
                        full = None
            if best is None or full is None:
                idle += 1
                if idle >= PATIENCE:
                    break
                continue
            idle = 0
            point = best[0]
            current = best[1]
            pending.remove(point)
            out.chosen.append(point)
            out.score = full
            out.steps.append(
                {
                    "added": point.label,
                    "kept": [p.label for p in out.chosen],
                    "accuracy": round(full.accuracy, 6),
                    "drop": round(reference - full.accuracy, 6),
                    "sqnr_db": round(full.sqnr_db, 3),
                }
            )
            log(
                f"  kept point {point.label}: {scorer.metric} {full.accuracy:.4f} "
                f"(drop {reference - full.accuracy:.4f})"
            )
        if drop_of(reference, out.score.accuracy) > max_drop and len(out.chosen) < max_points:
            rest = [s.point for s in ordered if s.point not in out.chosen]
            group = _bulk(out, rest, materialize, scorer, max_drop, max_points - len(out.chosen), path, log)
            _prune(out, group, materialize, scorer, max_drop, path, log)
    out.budget_met = drop_of(reference, out.score.accuracy) <= max_drop
    return out


def _bulk(
    out: PointSearch,
    pending: Sequence[Point],
    materialize: Callable[[Sequence[Point]], bytes],
    scorer: Scorer,
    max_drop: float,
    room: int,
    path: Path,
    log: Callable[[str], None],
) -> list[Point]:
    """Keep the next worst points as one group (sizes 2, 4, ... up to `room`): the smallest group that
    meets the budget, returned; none when no group does."""
    reference = scorer.reference_accuracy
    sizes: list[int] = []
    size = 2
    while size < min(room, len(pending)):
        sizes.append(size)
        size *= 2
    if min(room, len(pending)) > 0:
        sizes.append(min(room, len(pending)))
    if not sizes:
        return []
    log(
        f"  single points stalled; bulk step: the next {', '.join(map(str, sizes))} worst points as one group"
    )
    met: tuple[list[Point], Any] | None = None
    for size in sizes:
        group = list(pending[:size])
        path.write_bytes(materialize([*out.chosen, *group]))
        got = scorer(path)
        log(
            f"  bulk {size} points float -> {scorer.metric} {got.accuracy:.4f} on {len(scorer.samples)} "
            f"(drop {reference - got.accuracy:.4f}), sqnr {got.sqnr_db:.2f} dB"
        )
        if drop_of(reference, got.accuracy) <= max_drop:
            met = (group, got)
            break
        if got.accuracy > out.score.accuracy + MIN_GAIN and (
            out.best_group is None or got.accuracy > out.best_group[1].accuracy
        ):
            out.best_group = (group, got)
    if met is None:
        log("  bulk step: no group meets the budget; none kept")
        return []
    group, got = met
    out.chosen.extend(group)
    out.score = got
    out.steps.append(
        {
            "added": f"{len(group)} points (bulk)",
            "kept": [p.label for p in out.chosen],
            "accuracy": round(got.accuracy, 6),
            "drop": round(reference - got.accuracy, 6),
            "sqnr_db": round(got.sqnr_db, 3),
        }
    )
    log(
        f"  kept {len(group)} points (bulk): {scorer.metric} {got.accuracy:.4f} (drop {reference - got.accuracy:.4f})"
    )
    return group


def _prune(
    out: PointSearch,
    group: Sequence[Point],
    materialize: Callable[[Sequence[Point]], bytes],
    scorer: Scorer,
    max_drop: float,
    path: Path,
    log: Callable[[str], None],
) -> None:
    """A bulk group is kept whole because no smaller prefix met the budget, not because each member
    is needed: each is tried out again, last (least damaged by rounding) first, and stays quantized
    when the budget holds without it. Every point left float runs its consumers in float: on a
    YOLOv8-style head an 11-point group cost 0.45x -> 0.69x float latency."""
    if not group:
        return
    reference = scorer.reference_accuracy
    for point in reversed(list(group)):
        trial = [p for p in out.chosen if p != point]
        path.write_bytes(materialize(trial))
        got = scorer(path)
        held = drop_of(reference, got.accuracy) <= max_drop
        log(
            f"  prune {point.label}: {scorer.metric} {got.accuracy:.4f} without it "
            f"({'budget holds: quantized again' if held else 'kept'})"
        )
        if held:
            out.chosen, out.score = trial, got
    if len(out.chosen) < len(out.steps[-1]["kept"]):
        out.steps.append(
            {
                "added": f"pruned to {len(out.chosen)} points",
                "kept": [p.label for p in out.chosen],
                "accuracy": round(out.score.accuracy, 6),
                "drop": round(reference - out.score.accuracy, 6),
                "sqnr_db": round(out.score.sqnr_db, 3),
            }
        )


def table(ordered: Sequence[Signal], trials: Sequence[Trial]) -> list[dict[str, Any]]:
    """Every point in cheap order with what the task metric said when it was measured."""
    measured: dict[str, Trial] = {}
    for t in trials:
        measured[t.point.label] = t
    rows = []
    for i, s in enumerate(ordered):
        key = s.point.label
        found = measured.get(key)
        rows.append(
            {
                "rank": i + 1,
                "layer": key,
                "op_type": s.point.producer,
                "kind": s.point.kind,
                "nodes": 1,
                "sqnr_db": round(s.sqnr_db, 3),
                "range_ratio": round(s.range_ratio, 2),
                "kept_accuracy": None if found is None else round(found.accuracy, 6),
                "kept_samples": None if found is None else found.samples,
            }
        )
    return rows


def format_table(rows: Sequence[Mapping[str, Any]], metric: str, limit: int = 20) -> str:
    """The point table as text, cheap order, with the confirmed metric where it was measured."""
    lines = [
        f"{'rank':>4}  {'point':<44} {'writer':<12} {'sqnr dB':>8} {'ratio':>7} {metric + ' kept float':>28}"
    ]
    for row in rows[:limit]:
        kept = "-" if row["kept_accuracy"] is None else f"{row['kept_accuracy']:.4f}"
        lines.append(
            f"{row['rank']:>4}  {row['layer'][:44]:<44} {row['op_type'][:12]:<12} {row['sqnr_db']:>8.2f} "
            f"{row['range_ratio']:>7.1f} {kept:>28}"
        )
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more")
    return "\n".join(lines)
