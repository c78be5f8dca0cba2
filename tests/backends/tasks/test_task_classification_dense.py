"""Classification on PaddleOCR's text-direction classifier and dense maps on its text detector (both from
the rapidocr wheel), and the regression measure: npuctl's numbers equal ones computed in the test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from task_models import noisy, rapidocr_model, run, text_line

from backends.passes.accuracy import ModelOutputs, score
from backends.tasks import Classification, Dense, Tensor

WORDS = ["HELLO 42", "npuctl", "AB12CD", "Quant 8", "Zebra", "OCR test", "x9y8z7", "Mixed Case"]


def _crop(text: str, flipped: bool) -> dict[str, np.ndarray]:
    gray = text_line(text, 48, 192)
    if flipped:
        gray = gray[::-1, ::-1]
    x = ((gray.astype(np.float32) / 255 - 0.5) / 0.5)[None, None].repeat(3, 1)
    return {"x": np.ascontiguousarray(x)}


def test_orientation_classifier_top1_against_labels_and_agreement_with_float(tmp_path: Path) -> None:
    model = rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx")
    labels = [i % 2 for i in range(len(WORDS))]  # 0: upright, 1: rotated 180 degrees
    feeds = [_crop(w, bool(label)) for w, label in zip(WORDS, labels, strict=True)]
    ref = run(model, feeds)
    out = run(noisy(model, tmp_path / "cls-noisy.onnx", 0.3, seed=2), feeds)
    top = [int(np.argmax(v[0])) for v in out]
    ref_top = [int(np.argmax(v[0])) for v in ref]
    want = sum(t == label for t, label in zip(top, labels, strict=True)) / len(labels)
    want_ref = sum(t == label for t, label in zip(ref_top, labels, strict=True)) / len(labels)
    agree = sum(a == b for a, b in zip(top, ref_top, strict=True)) / len(labels)
    print(top, ref_top, want, want_ref, agree)
    names = ["p"]
    got = score(ModelOutputs(names, out), ModelOutputs(names, ref), labels, Classification())
    assert (got.metric, got.accuracy, got.reference) == ("top1", pytest.approx(want), pytest.approx(want_ref))
    free = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, Classification())
    assert (free.metric, free.accuracy) == ("top1_agreement", pytest.approx(agree))
    assert 0.0 < agree < 1.0 or want < want_ref, "the perturbed classifier must differ from the float one"


def test_text_map_iou_and_regression_measures(tmp_path: Path) -> None:
    model = rapidocr_model("ch_PP-OCRv4_det_infer.onnx")
    feeds = []
    for i, word in enumerate(WORDS[:4]):
        frame = np.full((96, 160), 255, np.uint8)
        frame[20 + i * 4 : 68 + i * 4] = text_line(word, 48, 160)
        x = ((frame.astype(np.float32) / 255 - 0.5) / 0.5)[None, None].repeat(3, 1)
        feeds.append({"x": np.ascontiguousarray(x)})
    ref = run(model, feeds)
    out = run(noisy(model, tmp_path / "det-noisy.onnx", 0.05, seed=3), feeds)
    inter = sum(int(((r[0] > 0.5) & (o[0] > 0.5)).sum()) for r, o in zip(ref, out, strict=True))
    union = sum(int(((r[0] > 0.5) | (o[0] > 0.5)).sum()) for r, o in zip(ref, out, strict=True))
    names = ["maps"]
    got = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, Dense())
    print(inter, union, got.accuracy)
    assert 0.0 < inter / union < 1.0
    assert got.metric == "map_iou@0.5" and got.accuracy == pytest.approx(inter / union, abs=0.01)
    per_image = []
    for r, o in zip(ref, out, strict=True):
        rb, ob = r[0] > 0.5, o[0] > 0.5
        per_image.append(int((rb & ob).sum()) / int((rb | ob).sum()))
    assert got.extra["per_image_iou_mean"] == pytest.approx(sum(per_image) / len(per_image), abs=1e-9)
    assert got.extra["per_image_iou_min"] == pytest.approx(min(per_image), abs=1e-9)
    # any threshold: the binarization the application uses (PP-OCR's DB post-process binarizes at 0.3)
    at = 0.3
    inter3 = sum(int(((r[0] > at) & (o[0] > at)).sum()) for r, o in zip(ref, out, strict=True))
    union3 = sum(int(((r[0] > at) | (o[0] > at)).sum()) for r, o in zip(ref, out, strict=True))
    low = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, Dense(threshold=at))
    assert low.metric == "map_iou@0.3" and low.accuracy == pytest.approx(inter3 / union3, abs=1e-9)
    generic = score(ModelOutputs(names, out), ModelOutputs(names, ref))
    assert (
        generic.task == "generic" and generic.accuracy == got.accuracy and "generic measure" in generic.text
    )

    cosines, worst = [], 0.0
    for (r,), (o,) in zip(ref, out, strict=True):
        a, b = r.astype(np.float64).ravel(), o.astype(np.float64).ravel()
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
        worst = max(worst, float(np.abs(a - b).max() / np.abs(a).max()))
    numbers = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, Tensor())
    assert numbers.task == "regression" and numbers.metric == "cosine"
    assert numbers.accuracy == pytest.approx(sum(cosines) / len(cosines), abs=0.01)
    assert numbers.extra["max_relative_error"] == pytest.approx(worst, abs=0.01)
    assert "max relative error" in numbers.text
