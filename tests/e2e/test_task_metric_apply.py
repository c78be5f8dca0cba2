"""`npuctl apply` on a real detector with `evaluate.task: detection`: the box F1 recorded in the lock
file equals a decode + match written in the test, run on the very artifact npuctl built (the int8 .ort
from the store) and on the float model, against ground-truth boxes from a labels file."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "tasks"))
from independent import f1_and_ap, nms, yolox_rows
from task_models import ddddocr_model, run, text_frames

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: yolox}
spec:
  model: {path: ../models/det.onnx}
  target: cpu
  inputs: {images: [1, 3, 416, 416]}
  quantization:
    mode: ptq
    weights: int8
    per_channel: false
    calibration: {data: ../data/calib, samples: 2, method: minmax}
  evaluate:
    data: ../data/eval
    labels: ../data/eval/boxes.json
    task: {type: detection, score_threshold: 0.25, nms_iou: 0.45}
    warmup: 0
    runs: 2
  slo:
    accuracy: {max_drop: 1.0}
"""


@pytest.mark.slow
def test_the_recorded_box_f1_is_the_one_computed_independently(git_repo: Path, npuctl) -> None:
    (git_repo / "models").mkdir()
    shutil.copyfile(ddddocr_model("common_det.onnx"), git_repo / "models" / "det.onnx")
    frames, boxes = text_frames(6, (416, 416), 5, seed=1)
    feeds = [{"images": f.astype(np.float32).transpose(2, 0, 1)[None]} for f in frames]
    for folder, chosen in (("calib", feeds[:2]), ("eval", feeds[2:])):
        (git_repo / "data" / folder).mkdir(parents=True)
        for i, feed in enumerate(chosen):
            np.save(git_repo / "data" / folder / f"{i:02d}.npy", feed["images"])
    labels = {f"{i:02d}.npy": b for i, b in enumerate(boxes[2:])}
    (git_repo / "data" / "eval" / "boxes.json").write_text(json.dumps(labels))
    (git_repo / "specs" / "yolox.yaml").write_text(SPEC)
    done = npuctl(git_repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    lock = json.loads((git_repo / "specs" / "yolox.lock.json").read_text())
    variant = lock["variants"]["default"]
    measured = variant["measurements"]
    digest = variant["stages"]["compile"]["artifacts"]["ort"]["digest"]
    artifact = git_repo / "model.ort"  # onnxruntime reads the ORT format by its suffix
    shutil.copyfile(git_repo / ".npuctl" / "store" / digest[:2] / digest[2:], artifact)

    def decoded(values: list[list[np.ndarray]]) -> list[list[list[float]]]:
        return [nms(yolox_rows(v[0], (416, 416), (8, 16, 32)), 0.25, 0.45) for v in values]

    truth = [[[*b[:4], 1.0, b[4]] for b in sample] for sample in boxes[2:]]
    got = decoded(run(artifact, feeds[2:]))
    want, _ = f1_and_ap(got, truth)
    want_ref, _ = f1_and_ap(decoded(run(git_repo / "models" / "det.onnx", feeds[2:])), truth)
    print(measured["accuracy"], want, want_ref)
    assert measured["accuracy"]["measure"] == "detection box_f1@0.5"
    assert "box F1 at IoU 0.5 against ground-truth boxes" in measured["accuracy"]["detail"]
    assert measured["accuracy"]["value"] == pytest.approx(want, abs=0.01)
    assert measured["accuracy.reference"]["value"] == pytest.approx(want_ref, abs=0.01)
    [verdict] = json.loads(done.stdout)["specs"][0]["slo"]
    assert verdict["value"] == pytest.approx(max(want_ref - want, 0.0), abs=0.01)
