"""A heatmap head on the HTP: CenterFace's [1, 1, 16, 16] face map, int8 through QNN's own compiler and
its HTP simulator. The compile check judges the map as one channel (not 16 rows, most of them nearly
empty, where one uint8 step read as a whole row's range), so the correct build passes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.built_once import built_once
from tests.backends.face_models import centerface, face_samples
from tests.conftest import git, run_npuctl

pytest.importorskip("onnxruntime_qnn")
pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: face}
spec:
  model: {path: ../models/centerface.onnx, version: v1}
  target: qualcomm-htp-v75
  inputs: {'input.1': [1, 3, 64, 64]}
  quantization:
    mode: ptq
    calibration: {data: ../data/face, samples: 6}
  evaluate: {data: ../data/face, warmup: 1, runs: 3}
"""


def _build(repo: Path) -> dict[str, Any]:
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    for sub in ("specs", "models"):
        (repo / sub).mkdir()
    centerface(repo / "models")
    face_samples(repo / "data" / "face")
    (repo / "specs" / "face.yaml").write_text(SPEC)
    result = run_npuctl(repo, "apply", "--json", timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {s["name"]: s for s in json.loads(result.stdout)["specs"]}


def test_a_heatmaps_int8_htp_build_passes_its_check(tmp_path_factory: pytest.TempPathFactory) -> None:
    repo, _ = built_once(tmp_path_factory, "qnn-heatmap", _build)
    variant = json.loads((repo / "specs" / "face.lock.json").read_text())["variants"]["default"]
    assert {"context_model", "context_binary"} <= set(variant["stages"]["compile"]["artifacts"])
    assert variant["measurements"]["accuracy"]["evidence"] == "measured:host simulator"
