"""Evidence rules judged by verify: an estimate that could not count the model's work is "unknown"
(never "met"), and a bundle whose vendor tool did not run gives no size verdict."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from backends.catalog import target
from backends.passes import placement
from reconciler.engine.verify import judge
from reconciler.records.measured import measurements as read_measurements
from tests.conftest import DIGITS_SPEC, run_npuctl


def _uncountable() -> onnx.ModelProto:
    """x -> NonZero -> Transpose -> ReduceSum: the NonZero's output shape is data-dependent, so the work
    after it cannot be counted from the graph."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
            helper.make_node("Transpose", ["nz"], ["t"], name="transpose"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("t", TensorProto.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_an_estimate_that_could_not_count_the_work_is_unknown_not_met() -> None:
    report = placement.compute(_uncountable(), target("rk3588"), {"mode": "none"})
    assert report["estimate"]["uncounted"] == ["nonzero", "transpose"]
    measured = placement.measurements(report)["latency_ms.estimate"]
    assert measured["value"] is None and "could not be counted" in measured["detail"]
    (verdict,) = judge(
        {"latency_ms": {"p90": 1000.0}}, read_measurements({"latency_ms.estimate": measured}), "default"
    )
    assert (verdict.verdict, verdict.passed, verdict.value) == ("unknown", None, None)
    assert "nonzero" in verdict.detail


def test_a_counted_model_keeps_its_estimate() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = placement.compute(model, target("rk3588"), {"mode": "none"})
    measured = placement.measurements(report)["latency_ms.estimate"]
    assert report["estimate"]["uncounted"] == [] and measured["value"] > 0
    (verdict,) = judge(
        {"latency_ms": {"p90": 1000.0}}, read_measurements({"latency_ms.estimate": measured}), "default"
    )
    assert verdict.verdict == "met on estimate"


def test_a_bundle_whose_tool_did_not_run_gives_no_size_verdict(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: ascend-310p")
    spec.write_text(text.replace("    accuracy: {min: 0.5}", "    accuracy: {min: 0.5}\n    size_mb: 100"))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "ASCEND_TOOLKIT_HOME": ""}
    result = run_npuctl(digits_repo, "apply", "--json", env=env)
    out = json.loads(result.stdout)["specs"][0]
    assert next(s for s in out["stages"] if s["name"] == "compile")["action"] == "built", result.stdout
    size = next(v for v in out["slo"] if v["name"] == "size_mb")
    assert size["value"] is None and size["passed"] is None and size["verdict"] == "unverified", size
    assert "vendor tool did not run" in size["detail"]
    assert result.returncode == 3
