"""`npuctl apply` on an RKNN target end to end: int8 with calibration, simulator task accuracy."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from rknn_helpers import needs_rknn

from tests.conftest import DIGITS_SPEC, qdq_digits, run_npuctl

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


def test_a_yolov8_export_keeps_its_decode_tail_float16_and_its_boxes(git_repo: Path) -> None:
    """NudeNet's YOLOv8n export on rk3588 with defaults: its output concatenates boxes in pixels and
    scores in 0-1, which one int8 scale rounds to zero scores (box F1 0). The tail after the last Conv
    is a float16 custom hybrid, and the compile's check reads the simulator's outputs as detections
    (the declared task), so a build that lost its boxes could not pass it."""
    import numpy as np

    from tests.backends.passes.npu_models import photo
    from tests.backends.tasks.task_models import NUDENET, wheel_file

    (git_repo / "models").mkdir()
    (git_repo / "models" / "320n.onnx").write_bytes(
        wheel_file(NUDENET, "nudenet", "320n.onnx", ("320n.onnx",)).read_bytes()
    )
    from skimage import transform

    for kind, names in (
        ("calib", ("astronaut", "coffee", "chelsea", "rocket")),
        ("eval", ("astronaut", "chelsea")),
    ):
        folder = git_repo / "data" / kind
        folder.mkdir(parents=True)
        for name in names:
            image = transform.resize(photo(name), (320, 320), preserve_range=True, anti_aliasing=True)
            np.save(folder / f"{name}.npy", (image / 255.0).astype(np.float32).transpose(2, 0, 1)[None])
    (git_repo / "specs" / "det.yaml").write_text(
        """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: det}
spec:
  model: {path: ../models/320n.onnx}
  target: rk3588
  inputs: {images: [1, 3, 320, 320]}
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 4}
  evaluate:
    data: ../data/eval
    task: {type: detection}
"""
    )
    result = run_npuctl(git_repo, "apply", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lock = json.loads((git_repo / "specs" / "det.lock.json").read_text())["variants"]["default"]
    with sqlite3.connect(git_repo / ".npuctl" / "state.db") as db:
        reports = {stage: json.loads(r) for stage, r in db.execute("select stage, report from records")}
    tail = reports["quantize"]["rknn_quantization"]["tail_hybrid"]["nodes"]
    assert "/model.22/Concat_25" in tail and "/model.22/Sigmoid" in tail
    assert reports["compile"]["tail_hybrid"] == {"kept": True, "nodes": len(tail)}
    check = reports["compile"]["check"]
    assert check["metric"] == "detection box_f1@0.5" and check["passed"] is True
    assert lock["measurements"]["accuracy"]["value"] >= 0.9


def test_a_jax2tf_clamp_to_minus_infinity_is_read_through_before_the_toolkit(git_repo: Path) -> None:
    """magika (a jax2tf export) clamps its logits with `Max(x, -inf)` before a softmax; rknn-toolkit2's
    quantizer read the bound as a range and failed ("cannot convert float NaN to integer"). The
    quantize stage hands the toolkit the model with that clamp read through (exact), and the int8
    build agrees with float on the simulator."""
    import numpy as np
    import onnx

    from tests.backends.tasks.task_models import wheel_file

    member = "models/standard_v3_3/model.onnx"
    source = wheel_file("magika==1.0.3", "magika", member, (member,))
    (git_repo / "models").mkdir()
    (git_repo / "models" / "magika.onnx").write_bytes(source.read_bytes())
    assert any(n.op_type == "Max" for n in onnx.load(str(source)).graph.node)
    rng = np.random.default_rng(0)
    for kind, count in (("calib", 8), ("eval", 4)):
        folder = git_repo / "data" / kind
        folder.mkdir(parents=True)
        for i in range(count):  # file bytes as magika reads them: 0-255, 256 for padding
            np.save(folder / f"{i}.npy", rng.integers(0, 257, (1, 2048)).astype(np.int32))
    (git_repo / "specs" / "magika.yaml").write_text(
        """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: magika}
spec:
  model: {path: ../models/magika.onnx}
  target: rk3588
  inputs: {bytes: [1, 2048]}
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 8}
  evaluate:
    data: ../data/eval
    task: {type: classification}
"""
    )
    result = run_npuctl(git_repo, "apply", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with sqlite3.connect(git_repo / ".npuctl" / "state.db") as db:
        reports = {stage: json.loads(r) for stage, r in db.execute("select stage, report from records")}
    assert any("unbounded_clamp x1" in note for note in reports["quantize"]["notes"]), reports["quantize"]
    lock = json.loads((git_repo / "specs" / "magika.lock.json").read_text())["variants"]["default"]
    assert lock["measurements"]["accuracy"]["value"] >= 0.75


@pytest.mark.parametrize("mode", ["qat", "none"])
def test_a_model_that_arrives_with_its_own_q_dq_builds_from_its_scales_and_is_checked(
    digits_repo: Path, mode: str
) -> None:
    """The digits model quantized by ONNX Runtime's static quantizer (Q/DQ format), `mode: qat`: the
    toolkit reads the scales (do_quantization off) and lays out INT8 tensors, the record says whose
    quantization it is (not "float16"), the compile checks the build on the simulator against its
    source, and evaluate measures it there (the toolkit's accuracy_analysis takes a QAT model on a
    board only, so it is not asked). The toolkit reads Q/DQ whatever the spec's mode, so `none` on
    such a model is the same integer build, and is recorded as one."""
    qdq_digits(digits_repo)
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: rk3588")
    text = text.replace("digits.onnx", "qdq.onnx").replace(
        "  evaluate:", f"  quantization: {{mode: {mode}}}\n  evaluate:"
    )
    (digits_repo / "specs" / "digits.yaml").write_text(text.replace("latency_ms: {p90: 1000}", "size_mb: 1"))
    result = run_npuctl(digits_repo, "apply", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout)["specs"][0]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["accuracy.min"]["evidence"] == "measured:host simulator", verdicts
    assert verdicts["accuracy.min"]["passed"] is True
    with sqlite3.connect(digits_repo / ".npuctl" / "state.db") as db:
        reports = {s: json.loads(r) for s, r in db.execute("select stage, report from records")}
    compile_report = reports["compile"]
    assert compile_report["quantized_dtype"] == "the model's own Q/DQ", compile_report
    check = compile_report["check"]
    assert check["ran"] and check["passed"] and check["drop"] <= check["budget"], check
    assert reports["evaluate"]["accuracy_analysis"] is None
    logs = list((digits_repo / ".npuctl" / "logs" / "digits" / "default").glob("compile-*.log"))
    tensors = [
        line for log in logs for line in log.read_text().splitlines() if "_DequantizeLinear_Output" in line
    ]
    assert any(" INT8 " in line for line in tensors), "the toolkit laid out the model's weights as INT8"
