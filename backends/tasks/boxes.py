"""Box arithmetic shared by the detection decoders and metrics: IoU, NMS, matching, average precision.

Boxes are float arrays [K, 4] of (x1, y1, x2, y2) in the model input's pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Detections:
    boxes: np.ndarray
    """[K, 4] x1, y1, x2, y2."""
    scores: np.ndarray
    """[K]."""
    classes: np.ndarray
    """[K] integer class ids."""

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def empty() -> Detections:
    import numpy as np

    return Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=np.int64))


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` [K, 4] with every box in `b` [M, 4] (area without the +1 pixel)."""
    import numpy as np

    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    a, b = _ordered(a), _ordered(b)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    out: np.ndarray = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    return out


def _ordered(boxes: np.ndarray) -> np.ndarray:
    """Corners as (left, top, right, bottom) whichever way round they came: a decoder's negative width or
    a label file's (x2, y1, x1, y2) is the same box, not an empty one."""
    import numpy as np

    xs, ys = boxes[:, [0, 2]], boxes[:, [1, 3]]
    out: np.ndarray = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], axis=1)
    return out


def nms(dets: Detections, iou: float, agnostic: bool, limit: int) -> Detections:
    """Greedy non-maximum suppression: highest score first (ties: lower index), a box overlapping a kept
    box of the same class (any class when `agnostic`) by more than `iou` is dropped; at most `limit` kept.
    One row of IoUs per kept box, so memory stays linear in the candidates (a low score threshold on an
    8400-anchor head leaves thousands)."""
    import numpy as np

    order = np.argsort(-dets.scores, kind="stable")
    boxes, classes = dets.boxes[order], dets.classes[order]
    alive = np.ones(len(order), dtype=bool)
    kept: list[int] = []
    for i in range(len(order)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) >= limit:
            break
        rest = np.arange(i + 1, len(order))
        rest = rest[alive[rest]]
        if not agnostic:
            rest = rest[classes[rest] == classes[i]]
        overlaps = iou_matrix(boxes[i : i + 1], boxes[rest])[0]
        alive[rest[overlaps > iou]] = False
    pick = order[kept]
    return Detections(dets.boxes[pick], dets.scores[pick], dets.classes[pick])


def match(pred: Detections, truth: Detections, iou: float) -> np.ndarray:
    """Per prediction (in descending score order), whether it is a true positive: it overlaps an
    unmatched true box of its class by at least `iou`, the best such box being taken."""
    import numpy as np

    order = np.argsort(-pred.scores, kind="stable")
    overlaps = iou_matrix(pred.boxes[order], truth.boxes)
    taken = np.zeros(len(truth), dtype=bool)
    hits = np.zeros(len(order), dtype=bool)
    for i, k in enumerate(order):
        if not len(truth):
            break
        candidates = np.where((truth.classes == pred.classes[k]) & ~taken, overlaps[i], -1.0)
        j = int(np.argmax(candidates))
        if candidates[j] >= iou:
            taken[j] = True
            hits[i] = True
    return hits


@dataclass
class BoxTally:
    """True/false positives, misses and per-class (score, hit) lists over every sample added."""

    iou: float
    tp: int = 0
    fp: int = 0
    fn: int = 0
    per_class: dict[int, list[tuple[float, bool]]] = field(default_factory=dict)
    truths: dict[int, int] = field(default_factory=dict)

    def add(self, pred: Detections, truth: Detections) -> None:
        import numpy as np

        hits = match(pred, truth, self.iou)
        self.tp += int(hits.sum())
        self.fp += int((~hits).sum())
        self.fn += len(truth) - int(hits.sum())
        order = np.argsort(-pred.scores, kind="stable")
        for hit, k in zip(hits, order, strict=True):
            self.per_class.setdefault(int(pred.classes[k]), []).append((float(pred.scores[k]), bool(hit)))
        for c in truth.classes.tolist():
            self.truths[int(c)] = self.truths.get(int(c), 0) + 1

    def f1(self) -> float:
        denominator = 2 * self.tp + self.fp + self.fn
        return 1.0 if denominator == 0 else 2 * self.tp / denominator

    def mean_ap(self) -> float:
        """Mean over classes with true boxes of the all-point interpolated average precision (VOC 2010+);
        with no true box at all: 1.0 when nothing was predicted either, else 0.0."""
        if not self.truths:
            return 1.0 if not self.fp else 0.0
        aps = [average_precision(self.per_class.get(c, []), n) for c, n in sorted(self.truths.items())]
        return sum(aps) / len(aps)


def average_precision(scored: Sequence[tuple[float, bool]], truths: int) -> float:
    import numpy as np

    if truths == 0:
        return 0.0
    if not scored:
        return 0.0
    order = sorted(range(len(scored)), key=lambda i: -scored[i][0])
    hits = np.array([scored[i][1] for i in order], dtype=float)
    tp = np.cumsum(hits)
    fp = np.cumsum(1.0 - hits)
    recall = tp / truths
    precision = tp / np.maximum(tp + fp, 1e-12)
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    for i in range(len(p) - 2, -1, -1):
        p[i] = max(p[i], p[i + 1])
    steps = np.where(r[1:] != r[:-1])[0]
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))
