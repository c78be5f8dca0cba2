"""Detection on real detectors: ddddocr's YOLOX (raw grid head [1, N, 5+C]) and a YOLOv8-style head
[1, 4+C, N] built onto it in ONNX. npuctl's box F1 and mAP@0.5 (backends.tasks through
backends.passes.accuracy.score, as evaluate, the auto search and the SLOs compute them) equal a decode +
match written in the test (independent.py), against drawn ground-truth boxes and against the float model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from independent import f1_and_ap, nms, v8_rows, yolox_rows
from independent import iou as independent_iou
from task_models import ddddocr_model, noisy, run, text_frames, yolov8_head

from backends.passes.accuracy import ModelOutputs, score
from backends.tasks import Detection, resolve

THRESHOLD, NMS_IOU = 0.25, 0.45
STRIDES = (8, 16, 32)


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("det")
    yolox = ddddocr_model("common_det.onnx")
    frames, boxes = text_frames(4, (416, 416), 5, seed=0)
    feeds = [{"images": f.astype(np.float32).transpose(2, 0, 1)[None]} for f in frames]
    v8 = yolov8_head(yolox, folder / "v8.onnx")
    noisy_yolox = noisy(yolox, folder / "yolox-noisy.onnx", 0.05)
    noisy_v8 = yolov8_head(noisy_yolox, folder / "v8-noisy.onnx")
    return {
        "yolox": yolox,
        "v8": v8,
        "boxes": boxes,
        "outputs": {name: run(path, feeds) for name, path in
                    (("yolox", yolox), ("yolox-noisy", noisy_yolox), ("v8", v8), ("v8-noisy", noisy_v8))},
    }  # fmt: skip


def _npuctl(
    outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]], task: Any, labels: Any
) -> Any:
    names = ["out"]
    return score(ModelOutputs(names, outputs), ModelOutputs(names, reference), labels, task)


def _truth_rows(labels: list[list[list[float]]]) -> list[list[list[float]]]:
    return [[[b[0], b[1], b[2], b[3], 1.0, b[4]] for b in boxes] for boxes in labels]


@pytest.mark.parametrize("head", ["yolox", "v8"])
def test_box_f1_and_map_equal_an_independent_decode(detector: dict[str, Any], head: str) -> None:
    ref, out = detector["outputs"][head], detector["outputs"][f"{head}-noisy"]
    task = resolve(Detection(), detector[head])
    assert isinstance(task, Detection)
    assert task.grid_strides == (STRIDES if head == "yolox" else None), "the graph decides the grid decode"

    def decoded(values: list[list[np.ndarray]]) -> list[list[list[float]]]:
        rows = (lambda a: yolox_rows(a, (416, 416), STRIDES)) if head == "yolox" else v8_rows
        return [nms(rows(v[0]), THRESHOLD, NMS_IOU) for v in values]

    ref_boxes, out_boxes = decoded(ref), decoded(out)
    truth = _truth_rows(detector["boxes"])
    want_f1, want_ap = f1_and_ap(out_boxes, truth)
    want_ref_f1, want_ref_ap = f1_and_ap(ref_boxes, truth)
    vs_float_f1, vs_float_ap = f1_and_ap(out_boxes, ref_boxes)
    print(
        head,
        "labels",
        want_f1,
        want_ap,
        "float",
        want_ref_f1,
        want_ref_ap,
        "vs float",
        vs_float_f1,
        vs_float_ap,
    )
    assert 0.05 < vs_float_f1 < 0.99, "the perturbed model must not score trivially"

    labelled = _npuctl(out, ref, task, detector["boxes"])
    assert labelled.metric == "box_f1@0.5" and labelled.labelled
    assert labelled.accuracy == pytest.approx(want_f1, abs=0.01)
    assert labelled.reference == pytest.approx(want_ref_f1, abs=0.01)
    assert labelled.extra["map@0.5"] == pytest.approx(want_ap, abs=0.01)
    mean_ap = _npuctl(out, ref, Detection(grid_strides=task.grid_strides, input_hw=task.input_hw, metric="map"),
                      detector["boxes"])  # fmt: skip
    assert (mean_ap.metric, mean_ap.accuracy) == ("map@0.5", pytest.approx(want_ap, abs=0.01))
    assert mean_ap.reference == pytest.approx(want_ref_ap, abs=0.01)

    unlabelled = _npuctl(out, ref, task, None)
    assert unlabelled.accuracy == pytest.approx(vs_float_f1, abs=0.01) and unlabelled.reference == 1.0
    assert unlabelled.extra["map@0.5"] == pytest.approx(vs_float_ap, abs=0.01)
    assert "against the float model's boxes" in unlabelled.text


def test_both_heads_decode_to_the_same_boxes(detector: dict[str, Any]) -> None:
    """The YOLOX grid decode in npuctl and the one built into the v8 head's graph agree."""
    raw = resolve(Detection(), detector["yolox"])
    built = resolve(Detection(), detector["v8"])
    a = _npuctl(detector["outputs"]["yolox-noisy"], detector["outputs"]["yolox"], raw, detector["boxes"])
    b = _npuctl(detector["outputs"]["v8-noisy"], detector["outputs"]["v8"], built, detector["boxes"])
    assert a.accuracy == pytest.approx(b.accuracy, abs=1e-6)
    assert a.extra["boxes"] == b.extra["boxes"] > 0


def test_ssd_style_boxes_and_scores_outputs(detector: dict[str, Any]) -> None:
    """SSD-style: boxes [1, N, 4] (x1, y1, x2, y2) and scores [1, N, 1 + C] with a background column,
    built from the v8 head's outputs; the same boxes score the same."""

    def ssd(values: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        out = []
        for (v,) in values:
            t = v[0].T
            boxes = np.stack(
                [t[:, 0] - t[:, 2] / 2, t[:, 1] - t[:, 3] / 2, t[:, 0] + t[:, 2] / 2, t[:, 1] + t[:, 3] / 2],
                1,
            )
            scores = np.concatenate([1 - t[:, 4:5], t[:, 4:]], 1)
            out.append([boxes[None], scores[None]])
        return out

    names = ["boxes", "scores"]
    ref, out = ssd(detector["outputs"]["v8"]), ssd(detector["outputs"]["v8-noisy"])
    labels = [[[*b[:4], 1.0] for b in boxes] for boxes in detector["boxes"]]  # class 1: 0 is background
    got = score(ModelOutputs(names, out), ModelOutputs(names, ref), labels, Detection(background_class=0))
    want = _npuctl(detector["outputs"]["v8-noisy"], detector["outputs"]["v8"], Detection(), detector["boxes"])
    assert got.accuracy == pytest.approx(want.accuracy, abs=1e-6)


def test_detection_labels_file_is_read_by_sample_name(tmp_path: Path) -> None:
    from backends.sdk.errors import TerminalError
    from backends.tasks import labels

    path = tmp_path / "boxes.json"
    path.write_text('{"a.png": [[1, 2, 3, 4, 0]], "b.png": []}')
    read = labels.read(Detection(), path)
    assert labels.for_samples(["b.png", "a.png"], read, "t") == [[], [[1.0, 2.0, 3.0, 4.0, 0.0]]]
    path.write_text('{"a.png": [[1, 2, 3]]}')
    with pytest.raises(
        TerminalError, match=r"boxes.json: a.png: expected a list of \[x1, y1, x2, y2, class\]"
    ):
        labels.read(Detection(), path)


def test_a_head_without_its_sigmoids_is_read_as_logits(detector: dict[str, Any], tmp_path: Path) -> None:
    """The same YOLOX with the head's Sigmoid nodes replaced by Identity outputs logits: the graph
    says so (resolve), the decoder applies the sigmoid, and the metric is the one of the original."""
    import onnx

    def stripped(source: Path, out: Path) -> Path:
        proto = onnx.load(str(source))
        for node in proto.graph.node:
            if node.op_type == "Sigmoid" and any(
                n.op_type == "Concat" for n in proto.graph.node if node.output[0] in n.input
            ):
                node.op_type = "Identity"
        onnx.save(proto, str(out))
        return out

    frames, _ = text_frames(4, (416, 416), 5, seed=0)
    feeds = [{"images": f.astype(np.float32).transpose(2, 0, 1)[None]} for f in frames]
    plain = stripped(detector["yolox"], tmp_path / "logits.onnx")
    noisy_plain = stripped(noisy(detector["yolox"], tmp_path / "n.onnx", 0.05), tmp_path / "n-logits.onnx")
    task = resolve(Detection(), plain)
    assert isinstance(task, Detection) and task.logits and task.grid_strides == STRIDES
    assert not resolve(Detection(), detector["yolox"]).logits  # type: ignore[union-attr]
    got = _npuctl(run(noisy_plain, feeds), run(plain, feeds), task, detector["boxes"])
    want = _npuctl(detector["outputs"]["yolox-noisy"], detector["outputs"]["yolox"],
                   resolve(Detection(), detector["yolox"]), detector["boxes"])  # fmt: skip
    assert (
        got.accuracy == pytest.approx(want.accuracy, abs=1e-6) and got.extra["boxes"] == want.extra["boxes"]
    )


CAPTCHA = "captcha-recognizer==1.0.2"


def _slider_frames(count: int) -> tuple[list[np.ndarray], list[list[float]]]:
    """scikit-image's photographs (0..1, NCHW) each with a slider captcha's gap: a darkened 90-pixel
    square with a light outline, and where it is [x1, y1, x2, y2]."""
    from skimage import data, transform

    rng = np.random.default_rng(4)
    frames, gaps = [], []
    for name in ("chelsea", "coffee", "rocket", "astronaut")[:count]:
        photo = np.asarray(getattr(data, name)(), np.float32) / 255.0
        img = transform.resize(photo, (640, 640), anti_aliasing=True).astype(np.float32)
        y, x = int(rng.integers(60, 500)), int(rng.integers(250, 520))
        img[y : y + 90, x : x + 90] *= 0.35
        for part in (img[y : y + 90, x : x + 3], img[y : y + 90, x + 87 : x + 90]):
            part[...] = 0.95
        for part in (img[y : y + 3, x : x + 90], img[y + 87 : y + 90, x : x + 90]):
            part[...] = 0.95
        frames.append(img.transpose(2, 0, 1)[None])
        gaps.append([float(x), float(y), float(x + 90), float(y + 90)])
    return frames, gaps


def test_a_yolov8_seg_head_scores_its_classes_not_its_mask_coefficients() -> None:
    """captcha-recognizer's YOLOv8-seg ([1, 4+1+32, 8400] beside prototypes [1, 32, 160, 160]): npuctl
    decodes the boxes the test decodes from the class column alone, the gap each time; read as 33
    classes, the mask coefficients would put boxes above the threshold on hundreds of anchors."""
    from task_models import wheel_file

    from backends.tasks.detection import decode

    model = wheel_file(CAPTCHA, "captcha_recognizer", "models/slider.onnx", ("models/slider.onnx",))
    frames, gaps = _slider_frames(3)
    outputs = run(model, [{"images": f} for f in frames])
    task = resolve(Detection(), model)
    assert isinstance(task, Detection)
    hits = 0
    for (head, protos), gap in zip(outputs, gaps, strict=True):
        assert head.shape == (1, 37, 8400) and protos.shape == (1, 32, 160, 160)
        found = decode(task, ["output0", "output1"], [head, protos])
        table = head[0][:5]  # box and the one class: the mask coefficients left out
        expected = nms(v8_rows(table[None]), THRESHOLD, NMS_IOU)
        assert len(found) == len(expected)
        assert np.allclose(found.boxes[np.argsort(-found.scores)], [r[:4] for r in expected], atol=1e-3)
        hits += any(independent_iou([*box, 0.0, 0], [*gap, 0.0, 0]) > 0.7 for box in found.boxes.tolist())
        assert int((head[0][5:].max(0) > THRESHOLD).sum()) > 100  # what the coefficients would have added
    assert hits >= 2, "the class column finds the gaps the test drew"
