"""Which data the auto search measures its budget on: the SLO's evaluation set, its labels and task."""

from __future__ import annotations

from pathlib import Path

import pytest
from quant_helpers import DIGITS_CALIB, digits_model

from backends.passes.quant import search_set as ss
from backends.tasks import Classification
from tests.conftest import DIGITS

EVAL = DIGITS / "data" / "eval"


def _inputs() -> dict[str, Path]:
    return {"eval_data": EVAL, "labels": EVAL / "labels.txt"}


def test_the_evaluation_set_with_its_labels_and_task(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    config = {"evaluate.task": {"type": "classification", "metric": "top5"}, "evaluate.metric": "top1"}
    found = ss.search_set(config, _inputs(), model, sorted(DIGITS_CALIB.glob("*.npy")), 16)
    assert found.slo_data and found.of is None and len(found.samples) == 360
    assert (
        isinstance(found.task, Classification)
        and found.task.metric == "top5"
        and found.labels is not None
        and len(found.labels) == 360
    )
    assert found.describe().endswith("against labels: the data the accuracy SLO is judged on")


def test_a_set_too_large_to_hold_is_cut_to_a_stated_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = digits_model(tmp_path)
    monkeypatch.setattr(ss, "MAX_ELEMENTS", 64 * 50)  # 50 digits of 8x8
    found = ss.search_set({}, _inputs(), model, [], 16)
    assert not found.slo_data and (len(found.samples), found.of) == (50, 360)
    assert found.labels is not None and len(found.labels) == 50
    assert "the first 50 of 360 samples of evaluate.data (eval) against labels: a split" in found.describe()


def test_without_evaluation_data_the_calibration_samples_are_not_the_slo_data(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    files = sorted(DIGITS_CALIB.glob("*.npy"))
    found = ss.search_set({}, {}, model, files, 16)
    assert (len(found.samples), found.labels, found.task, found.slo_data) == (16, None, None, False)
    assert "not the SLO's data" in found.describe()
