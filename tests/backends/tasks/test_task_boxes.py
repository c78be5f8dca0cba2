"""Box arithmetic with answers worked out by hand: NMS, greedy matching, F1 and all-point AP."""

from __future__ import annotations

import time

import numpy as np
import pytest

from backends.tasks.boxes import BoxTally, Detections, nms


def _dets(rows: list[list[float]]) -> Detections:
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
    return Detections(a[:, :4], a[:, 4], a[:, 5].astype(np.int64))


def test_nms_per_class_and_agnostic() -> None:
    # boxes 0 and 1 overlap with IoU 81/100 = 0.81; box 2 is elsewhere
    dets = _dets([[0, 0, 10, 10, 0.9, 0], [1, 1, 10, 10, 0.8, 0], [50, 50, 60, 60, 0.7, 0]])
    assert nms(dets, 0.45, False, 100).scores.tolist() == [0.9, 0.7]
    other_class = _dets([[0, 0, 10, 10, 0.9, 0], [1, 1, 10, 10, 0.8, 1]])
    assert len(nms(other_class, 0.45, False, 100)) == 2
    assert len(nms(other_class, 0.45, True, 100)) == 1
    assert len(nms(dets, 0.9, False, 100)) == 3, "0.81 is not above 0.9"
    assert len(nms(dets, 0.45, False, 1)) == 1


def test_f1_and_average_precision() -> None:
    truth = _dets([[0, 0, 10, 10, 1, 0], [20, 20, 30, 30, 1, 0]])
    pred = _dets([[0, 0, 10, 10, 0.9, 0], [40, 40, 50, 50, 0.8, 0], [20, 20, 30, 31, 0.7, 0]])
    tally = BoxTally(0.5)
    tally.add(pred, truth)
    assert (tally.tp, tally.fp, tally.fn) == (2, 1, 0)
    assert tally.f1() == pytest.approx(2 * 2 / (2 * 2 + 1 + 0))
    # precision 1 up to recall 0.5, then 2/3 at recall 1.0
    assert tally.mean_ap() == pytest.approx(0.5 * 1.0 + 0.5 * (2 / 3))
    empty = BoxTally(0.5)
    empty.add(_dets([]), _dets([]))
    assert (empty.f1(), empty.mean_ap()) == (1.0, 1.0)


def test_nms_on_thousands_of_candidates_stays_linear_in_memory() -> None:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 600, (8400, 2))
    rows = np.concatenate(
        [xy, xy + rng.uniform(5, 40, (8400, 2)), rng.uniform(0, 1, (8400, 1)), np.zeros((8400, 1))], 1
    )
    start = time.perf_counter()
    kept = nms(_dets(rows.tolist()), 0.45, False, 300)
    assert len(kept) == 300
    print(f"nms over 8400 candidates: {time.perf_counter() - start:.2f} s")


def test_a_box_with_reversed_corners_is_the_same_box() -> None:
    """(x2, y2, x1, y1) or one axis swapped: IoU 1 with itself, and it matches its upright twin."""
    from backends.tasks.boxes import iou_matrix

    upright = np.asarray([[0.0, 0.0, 10.0, 20.0]])
    for reversed_ in ([[10.0, 20.0, 0.0, 0.0]], [[10.0, 0.0, 0.0, 20.0]], [[0.0, 20.0, 10.0, 0.0]]):
        box = np.asarray(reversed_)
        assert iou_matrix(box, box).tolist() == [[1.0]]
        assert iou_matrix(box, upright).tolist() == [[1.0]]
    # a half overlap worked by hand: [0,0,10,20] and [5,0,15,20] share 100 of 300
    shifted = np.asarray([[15.0, 20.0, 5.0, 0.0]])
    assert iou_matrix(upright, shifted)[0, 0] == pytest.approx(100 / 300)
    tally = BoxTally(0.5)
    tally.add(_dets([[10, 20, 0, 0, 0.9, 0]]), _dets([[0, 0, 10, 20, 1, 0]]))
    assert (tally.tp, tally.fp, tally.fn) == (1, 0, 0)
