"""`npuctl report` on a real apply of a YOLOv8-style detector (ddddocr's YOLOX with its decode built
in ONNX: one output concatenating box coordinates and class scores): the page names the head's
output Concat as range mixing, with the fix applied."""

from __future__ import annotations

import html
from pathlib import Path

import onnx
import pytest

from tests.backends.passes.yolo_head import _static_outputs, photo_samples, yolov8_at
from tests.conftest import run_npuctl

SIZE = 160
SPEC = f"""\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: v8}}
spec:
  model: {{path: ../models/v8.onnx}}
  target: cpu
  inputs: {{images: [1, 3, {SIZE}, {SIZE}]}}
  quantization:
    mode: ptq
    calibration: {{data: ../data/calib, samples: 4}}
"""


@pytest.mark.slow
def test_the_report_names_the_yolov8_heads_output_concat(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "models").mkdir()
    # the import stage wants declared output shapes: the ones one run gives
    _static_outputs(onnx.load(str(yolov8_at(tmp_path / "m", SIZE))), git_repo / "models" / "v8.onnx")
    photo_samples(git_repo / "data" / "calib", 4, calibration=True, size=SIZE)
    (git_repo / "specs" / "v8.yaml").write_text(SPEC)
    done = run_npuctl(git_repo, "apply")
    assert done.returncode in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    out = tmp_path / "v8.html"
    done = run_npuctl(git_repo, "report", "v8", "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    page = html.unescape(out.read_text())
    concat = [n for n in onnx.load(str(git_repo / "models" / "v8.onnx")).graph.node if n.op_type == "Concat"]
    line = next((ln for ln in page.splitlines() if "quantize range mixing:" in ln), "")
    assert line, "no range-mixing line on the page"
    # the head's output Concat (ORT's pre-processing may move the final Transpose above it)
    assert "Concat" in line and ("boxes_scores" in line or concat[-1].output[0] in line), line
    assert "kept float (its inputs quantized apart)" in line
