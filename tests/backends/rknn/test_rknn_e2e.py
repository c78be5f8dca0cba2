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
    _the_profile_is_the_cost_models_and_says_so(digits_repo)


def _the_profile_is_the_cost_models_and_says_so(digits_repo: Path) -> None:
    """The simulator times nothing, so RKNN's profile is the cost model's: every layer an ONNX node of
    the float model on the device its placement plans, at no less than its MACs at the NPU's int8 peak
    (computed here from the catalog), and nothing in it claims a measurement."""
    import onnx

    from backends.catalog import target

    shown = run_npuctl(digits_repo, "explain", "specs/digits.yaml", "--profile", "--json")
    profile = json.loads(shown.stdout)["profiles"]["default"]
    assert profile["evidence"].startswith("estimated") and "nothing ran" in profile["how"]
    assert profile["latency_ms"]["timed_p50"] is None and profile["runs"] == 0
    assert all(v.startswith("estimated") for v in profile["evidence_of"].values())
    nodes = {n.name for n in onnx.load(str(digits_repo / "models" / "digits.onnx")).graph.node}
    computed = [x for x in profile["layers"] if not x["inserted"]]
    assert {"/conv1/Conv", "/conv2/Conv", "/head/Gemm"} <= {n for x in computed for n in x["onnx_nodes"]}
    assert all(set(x["onnx_nodes"]) <= nodes and x["device"] == x["placement"] for x in computed)
    peak = target("rk3588").peak_tops_int8 * 1e12
    npu = [x for x in computed if x["macs"] > 0 and x["device"] == "NPU"]
    assert len(npu) >= 4, "both convolutions and both Gemms run on the NPU"
    for layer in npu:
        assert layer["precision"] == "int8" and layer["time_ms"] >= 2 * layer["macs"] / peak * 1e3 * 0.999
    assert profile["attribution"]["utilisation_note"].startswith("estimated")
    page = digits_repo / "report.html"
    assert run_npuctl(digits_repo, "report", "digits", "-o", str(page)).returncode == 0
    assert "Nothing ran for this profile: every figure in it is an estimate" in page.read_text()


CLS_SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata:
  name: cls
spec:
  model:
    package: rapidocr_onnxruntime
    path: models/ch_ppocr_mobile_v2.0_cls_infer.onnx
  target: rk3588
  inputs:
    x: [1, 3, 48, 192]
  quantization:
    mode: fp16
  evaluate:
    data: ../data/eval
    task: {type: classification}
  slo:
    npu_coverage: 0.99
"""


def test_the_toolkits_placement_wins_and_explain_and_report_show_where_the_op_table_disagreed(
    git_repo: Path,
) -> None:
    """The PP-OCR classifier, whose large GlobalAveragePools npuctl's op table leaves to the CPU and
    rknn-toolkit2 compiles into strided convolutions on the NPU: the lock's coverage is the toolkit's."""
    import numpy as np

    (git_repo / "specs" / "cls.yaml").write_text(CLS_SPEC)
    data = git_repo / "data" / "eval"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(data / f"{i}.npy", rng.standard_normal((1, 3, 48, 192)).astype(np.float32))
    result = run_npuctl(git_repo, "apply", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    lock = json.loads((git_repo / "specs" / "cls.lock.json").read_text())
    coverage = lock["variants"]["default"]["measurements"]["npu_coverage"]
    assert coverage["evidence"] == "estimated: rknn-toolkit2" and coverage["value"] == 1.0
    shown = json.loads(run_npuctl(git_repo, "explain", "specs/cls.yaml", "compile", "--json").stdout)
    found = shown["stages"][0]["disagreements"]
    assert "GlobalAveragePool" in {d["op_type"] for d in found}
    assert all(d["won"] == "rknn-toolkit2" and d["op_table"] != d["tool"] for d in found)
    page = json.loads(run_npuctl(git_repo, "report", "specs/cls.yaml", "--json").stdout)
    assert page["placement"]["source"] == "compile"
    assert page["placement"]["report"]["disagreements"] == found
    assert page["placement_before"]["report"]["coverage"]["nodes"]["fraction"] < 1.0
