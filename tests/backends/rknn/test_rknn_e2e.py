"""`npuctl apply` on an RKNN target end to end: int8 with calibration, simulator task accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rknn_helpers import needs_rknn

from tests.conftest import DIGITS_SPEC, run_npuctl

pytestmark = [pytest.mark.slow, needs_rknn]

QUANT = """\
  quantization:
    mode: ptq
    weights: int8
    activations: int8
    calibration: {data: ../data/calib, samples: 20, method: minmax}
  compile: {cores: 2}
"""


def test_apply_builds_an_int8_rknn_and_measures_it_on_the_simulator(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: rk3588")
    text = text.replace("  evaluate:", QUANT + "  evaluate:").replace("latency_ms: {p90: 1000}", "size_mb: 1")
    spec.write_text(text)
    result = run_npuctl(digits_repo, "apply", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)["specs"][0]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["accuracy.min"]["evidence"] == "measured:host simulator"
    assert verdicts["accuracy.min"]["passed"] is True
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    variant = lock["variants"]["default"]
    artifacts = variant["stages"]["compile"]["artifacts"]
    assert artifacts["rknn"]["file"] == "model.rknn" and artifacts["rknn_meta"]["file"] == "model.rknn.json"
    assert variant["stages"]["quantize"]["artifacts"]["model"]["file"] == "model.rknnq.tar"
    assert variant["measurements"]["accuracy"]["value"] > 0.8
    # nothing changed: everything is cached, and the artifact digests stay the same
    again = run_npuctl(digits_repo, "apply", "--json")
    stages = json.loads(again.stdout)["specs"][0]["stages"]
    assert all(s["action"] == "cached" for s in stages)
