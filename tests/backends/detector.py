"""A real detector repository for the vendor-backend tests: rapidocr's PP-OCRv4 text detector (from the
installed wheel) at a small fixed shape, with real photos as calibration and evaluation samples."""

from __future__ import annotations

import random
import shutil
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.backends.passes.npu_models import PPOCR

SIZE = 128
CALIB, EVAL = 6, 3

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/det.onnx}}
  target: {target}
  inputs: {{x: [1, 3, {size}, {size}]}}
  quantization:
    mode: {mode}
    calibration: {{data: ../{data}/calib, samples: {calib}, method: minmax}}
  evaluate:
    data: ../{data}/eval
    metric: fidelity
    warmup: 1
    runs: 3
  slo:
    accuracy: {{min: 0.1}}
"""


def text_images() -> Any:
    """bench/text_images.py: text in a real font drawn on real photos (disjoint calibration/eval)."""
    root = str(Path(__file__).resolve().parents[2] / "bench")
    if root not in sys.path:
        sys.path.append(root)
    import text_images as module

    return module


@cache
def text_frames() -> tuple[list[np.ndarray], list[np.ndarray]]:
    module = text_images()
    calib_photos, eval_photos = module.photos()
    rng = random.Random(0)
    calib = [module.make_image(calib_photos[i % len(calib_photos)], rng, SIZE) for i in range(CALIB)]
    evaluation = [module.make_image(eval_photos[i % len(eval_photos)], rng, SIZE) for i in range(EVAL)]
    return calib, evaluation


def write_det_repo(repo: Path, target: str, mode: str = "ptq", name: str = "det", data: str = "data") -> Path:
    """The spec file (specs/NAME.yaml) of a PP-OCR det deployment on `target`; its samples go to
    DATA/calib and DATA/eval (another folder than the digits samples when both share a repository)."""
    (repo / "models").mkdir(exist_ok=True)
    shutil.copyfile(PPOCR["det"][0], repo / "models" / "det.onnx")
    calib, evaluation = text_frames()
    for kind, frames in (("calib", calib), ("eval", evaluation)):
        text_images().write_npy(repo / data / kind, frames)
    spec = repo / "specs" / f"{name}.yaml"
    spec.parent.mkdir(exist_ok=True)
    spec.write_text(SPEC.format(name=name, target=target, size=SIZE, mode=mode, calib=CALIB, data=data))
    return spec
