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


CTC_SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: rec}
spec:
  model: {package: rapidocr_onnxruntime, path: models/ch_PP-OCRv4_rec_infer.onnx}
  target: cpu
  inputs: {x: [1, 3, 48, 192]}
  quantization:
    mode: ptq
    weights: int8
    per_channel: true
    calibration: {data: ../data/calib, samples: 2, method: minmax}
  evaluate:
    data: ../data/eval
    labels: ../data/eval/labels.txt
    task: {type: ctc, charset: ../data/charset.txt, metric: exact}
    warmup: 0
    runs: 2
  slo:
    accuracy: {max_drop: 1.0}
"""
TEXTS = ["HELLO 42", "npuctl", "AB12CD", "Quant 8", "Zebra", "OCR test", "x9y8z7", "Mixed Case"]


@pytest.mark.slow
def test_the_recorded_exact_match_and_cer_are_the_ones_computed_independently(git_repo: Path, npuctl) -> None:
    import onnx
    from independent import ctc_greedy, levenshtein
    from task_models import rapidocr_model, text_line

    model = rapidocr_model("ch_PP-OCRv4_rec_infer.onnx")
    proto = onnx.load(str(model), load_external_data=False)
    chars = [*next(p.value for p in proto.metadata_props if p.key == "character").split("\n"), " "]
    (git_repo / "data").mkdir()
    (git_repo / "data" / "charset.txt").write_text("\n".join(chars) + "\n", encoding="utf-8")
    feeds = [
        ((text_line(t, 48, 192).astype(np.float32) / 255 - 0.5) / 0.5)[None, None].repeat(3, 1) for t in TEXTS
    ]
    for folder, chosen in (("calib", feeds[:2]), ("eval", feeds[2:])):
        (git_repo / "data" / folder).mkdir()
        for i, x in enumerate(chosen):
            np.save(git_repo / "data" / folder / f"{i:02d}.npy", np.ascontiguousarray(x))
    lines = "".join(f"{i:02d}.npy\t{t}\n" for i, t in enumerate(TEXTS[2:]))
    (git_repo / "data" / "eval" / "labels.txt").write_text(lines, encoding="utf-8")
    (git_repo / "specs" / "rec.yaml").write_text(CTC_SPEC)
    done = npuctl(git_repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    variant = json.loads((git_repo / "specs" / "rec.lock.json").read_text())["variants"]["default"]
    digest = variant["stages"]["compile"]["artifacts"]["ort"]["digest"]
    artifact = git_repo / "model.ort"
    shutil.copyfile(git_repo / ".npuctl" / "store" / digest[:2] / digest[2:], artifact)

    def texts(path: Path) -> list[str]:
        return [
            "".join(chars[i - 1] for i in ctc_greedy(v[0])) for v in run(path, [{"x": x} for x in feeds[2:]])
        ]

    got, ref = texts(artifact), texts(model)
    truth = TEXTS[2:]
    exact = sum(g == t for g, t in zip(got, truth, strict=True)) / len(truth)
    ref_exact = sum(r == t for r, t in zip(ref, truth, strict=True)) / len(truth)
    cer = sum(levenshtein(list(g), list(t)) for g, t in zip(got, truth, strict=True)) / sum(map(len, truth))
    measured = variant["measurements"]
    print(got, ref, measured["accuracy"])
    assert measured["accuracy"]["measure"] == "ctc exact_match"
    assert measured["accuracy"]["value"] == pytest.approx(exact, abs=0.01)
    assert measured["accuracy.reference"]["value"] == pytest.approx(ref_exact, abs=0.01)
    assert f"CER {cer:.4f}" in measured["accuracy"]["detail"]
