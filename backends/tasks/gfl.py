"""GFL-style detection heads (PicoDet, NanoDet, GFL): per feature level, one class-score output
[1, N, C] and one box-distribution output [1, N, 4 * (R + 1)].

Each box side is a distance from the cell centre, given as a distribution over R + 1 bins (distribution
focal loss): its expected bin times the level's stride. The level's stride is the one whose grid
(ceil(H / s) x ceil(W / s) cells, row-major) has exactly N cells; centres are (cell + 0.5) * stride.
Which output of a level's pair holds the scores: the one a Sigmoid or Softmax ends in
(`config.resolve`), else the one whose width is not a multiple of 4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

STRIDES = (4, 8, 16, 32, 64, 128)
"""Strides a level may have (PicoDet uses 8-64, NanoDet 8-32)."""


def cells(input_hw: tuple[int, int], stride: int) -> tuple[int, int]:
    return math.ceil(input_hw[0] / stride), math.ceil(input_hw[1] / stride)


def level_pairs(shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, int]] | None:
    """(first, second) output indices per level, largest level first, when every output is a [1, N, K]
    with exactly two outputs per N and at least two levels; None otherwise."""
    by_rows: dict[int, list[int]] = {}
    for index, shape in enumerate(shapes):
        if len(shape) != 3 or shape[0] != 1 or shape[1] <= 0 or shape[2] <= 0:
            return None
        by_rows.setdefault(int(shape[1]), []).append(index)
    if len(by_rows) < 2 or any(len(group) != 2 for group in by_rows.values()):
        return None
    return [(group[0], group[1]) for _, group in sorted(by_rows.items(), reverse=True)]


def looks_like_gfl(shapes: Sequence[tuple[int, ...]], input_hw: tuple[int, int] | None) -> bool:
    pairs = level_pairs(shapes)
    if pairs is None or input_hw is None:
        return False
    widths_ok = all(shapes[a][2] % 4 == 0 or shapes[b][2] % 4 == 0 for a, b in pairs)
    return widths_ok and _strides(input_hw, [shapes[a][1] for a, _ in pairs]) is not None


def _strides(input_hw: tuple[int, int], rows: Sequence[int]) -> list[int] | None:
    found = []
    for n in rows:
        match = [s for s in STRIDES if math.prod(cells(input_hw, s)) == n]
        if not match:
            return None
        found.append(match[0])
    return found


def decode(
    arrays: Sequence[Any],
    names: Sequence[str],
    input_hw: tuple[int, int] | None,
    scores_named: frozenset[str],
) -> tuple[np.ndarray, np.ndarray]:
    """(boxes x1 y1 x2 y2, class scores) over every level's cells."""
    import numpy as np

    shapes = [tuple(a.shape) for a in arrays]
    pairs = level_pairs(shapes)
    if pairs is None or input_hw is None:
        raise TerminalError(
            "a gfl head needs pairs of [1, N, C] scores and [1, N, 4*(R+1)] box distributions, one pair per "
            f"feature level, and a known input size; got outputs {[list(s) for s in shapes]}"
        )
    strides = _strides(input_hw, [shapes[a][1] for a, _ in pairs])
    if strides is None:
        raise TerminalError(
            f"a gfl head's levels have {[shapes[a][1] for a, _ in pairs]} cells: no stride in {list(STRIDES)} "
            f"gives those grids on a {input_hw[0]}x{input_hw[1]} input"
        )
    all_boxes, all_scores = [], []
    for (a, b), stride in zip(pairs, strides, strict=True):
        score_at, dist_at = _roles(a, b, shapes, names, scores_named)
        rows, width = shapes[dist_at][1], shapes[dist_at][2]
        bins = width // 4
        logits = np.asarray(arrays[dist_at], dtype=np.float64).reshape(rows, 4, bins)
        logits = logits - logits.max(axis=2, keepdims=True)
        weights = np.exp(logits)
        weights /= weights.sum(axis=2, keepdims=True)
        distance = (weights * np.arange(bins)).sum(axis=2) * stride
        h, w = cells(input_hw, stride)
        ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        cx, cy = (xs.reshape(-1) + 0.5) * stride, (ys.reshape(-1) + 0.5) * stride
        all_boxes.append(
            np.stack([cx - distance[:, 0], cy - distance[:, 1], cx + distance[:, 2], cy + distance[:, 3]], 1)
        )
        all_scores.append(np.asarray(arrays[score_at], dtype=np.float64).reshape(rows, -1))
    return np.concatenate(all_boxes), np.concatenate(all_scores)


def _roles(
    a: int, b: int, shapes: Sequence[tuple[int, ...]], names: Sequence[str], scores_named: frozenset[str]
) -> tuple[int, int]:
    """(scores index, distributions index) of one level's pair."""
    if names[a] in scores_named and names[b] not in scores_named:
        return a, b
    if names[b] in scores_named and names[a] not in scores_named:
        return b, a
    four = [i for i in (a, b) if shapes[i][2] % 4 == 0]
    if len(four) == 1:
        return (b, a) if four[0] == a else (a, b)
    raise TerminalError(
        f"gfl head: cannot tell which of {names[a]} and {names[b]} holds the class scores (neither ends in a "
        "Sigmoid or Softmax, and both widths are multiples of 4)"
    )
