"""A throw-away repository with real ONNX models, for spec loading and validation tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0])


SQUEEZENET = _package_dir("onnx") / "backend/test/data/light/light_squeezenet.onnx"
"""Static input data_0 [1, 3, 224, 224]; nodes named n0, n1, ...; ops include Conv, Relu, Softmax."""
CLS = _package_dir("rapidocr_onnxruntime") / "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
"""Dynamic input x [?, 3, ?, ?] (batch unnamed, H and W named '?')."""

GOOD = """\
apiVersion: npuctl/v1
kind: Deployment
metadata:
  name: squeeze-cpu
spec:
  model:
    path: ../models/squeezenet.onnx
  target: cpu
  inputs:
    data_0: [1, 3, 224, 224]
  quantization:
    mode: ptq
    calibration:
      data: ../data/calib
      samples: 8
    sensitive_layers:
      nodes: ["n1*"]
      op_types: [Softmax]
  evaluate:
    data: ../data/eval
    labels: ../data/eval/labels.txt
    runs: 5
  slo:
    latency_ms: {p90: 20}
"""
"""A valid spec; each invalid case of the table edits some of its numbered lines."""

GOOD_CLS = """\
apiVersion: npuctl/v1
kind: Deployment
metadata:
  name: cls-cpu
spec:
  model: {path: ../models/cls.onnx}
  target: cpu
  inputs:
    x: [1, 3, 48, 192]
"""


def edit(text: str, lines: dict[int, str]) -> str:
    """`text` with the given 1-based lines replaced (line numbers of the others are kept)."""
    out = text.splitlines()
    for number, replacement in lines.items():
        out[number - 1] = replacement
    return "\n".join(out) + "\n"


@dataclass
class Repo:
    root: Path

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path


def make_repo(root: Path) -> Repo:
    (root / ".git").mkdir(parents=True)
    (root / "specs").mkdir()
    models = root / "models"
    models.mkdir()
    shutil.copyfile(SQUEEZENET, models / "squeezenet.onnx")
    shutil.copyfile(CLS, models / "cls.onnx")
    past = (1_600_000_000, 1_600_000_000)  # "committed long ago": summaries may be cached
    for model in models.iterdir():
        os.utime(model, past)
    for kind in ("calib", "eval"):
        (root / "data" / kind).mkdir(parents=True)
        (root / "data" / kind / "0.npy").write_bytes(b"")  # a sample file: validate never opens it
    (root / "data" / "eval" / "labels.txt").write_text("0\n")
    return Repo(root)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    root = tmp_path / "repo"
    made = make_repo(root)
    monkeypatch.chdir(root)
    yield made


def copy_quantized(repo: Repo, models: dict[str, Path]) -> None:
    """`models` copied into the repository's models folder, dated long ago (summaries may be cached)."""
    for name, path in models.items():
        shutil.copyfile(path, repo.root / "models" / f"{name}.onnx")
        os.utime(repo.root / "models" / f"{name}.onnx", (1_600_000_000, 1_600_000_000))
