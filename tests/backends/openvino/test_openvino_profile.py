"""OpenVINO's per-layer profile (PERF_COUNT) on the digits model quantized with NNCF for intel-npu: the
layers that ran int8 kernels say int8, the float ones say so, and the profile is evaluate's artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import copy_digits

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: digits-npu}
spec:
  model: {path: ../models/digits.onnx}
  target: intel-npu
  inputs: {image: [1, 1, 8, 8]}
  quantization:
    mode: ptq
    weights: int8
    activations: int8
    calibration: {data: ../data/calib, samples: 40}
  evaluate: {data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 2, runs: 10}
"""


def test_openvino_profile_shows_the_int8_layers_as_int8(git_repo: Path, npuctl) -> None:
    pytest.importorskip("openvino")
    copy_digits(git_repo)
    (git_repo / "specs" / "digits-npu.yaml").write_text(SPEC)
    done = npuctl(git_repo, "apply", "specs/digits-npu.yaml")
    assert done.returncode in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    shown = npuctl(git_repo, "explain", "specs/digits-npu.yaml", "--profile", "--json")
    profile = json.loads(shown.stdout)["profiles"]["default"]
    assert profile["runtime"].startswith("openvino") and profile["evidence"] == "measured:host"
    convs = [layer for layer in profile["layers"] if layer["op_type"] == "Convolution"]
    assert len(convs) == 2, "the digits model has two convolutions"
    for layer in convs:
        assert layer["exec_type"].upper().endswith("I8") and layer["precision"] == "int8", layer
    floats = [layer for layer in profile["layers"] if layer["precision"] == "fp32"]
    assert all("f32" in layer["exec_type"].lower() for layer in floats)
    assert profile["evidence_of"]["precision"].endswith("(PERF_COUNT)")
    total = sum(float(layer["time_ms"]) for layer in profile["layers"])
    assert profile["attribution"]["layers_sum_ms"] == pytest.approx(total, abs=1e-5)
