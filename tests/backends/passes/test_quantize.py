"""The quantize stage on the real digits example: ptq accuracy, determinism, rules, 16-bit, fp16, qat."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import (
    digits_model,
    eval_set,
    op_counts,
    ptq_config,
    run_quantize,
    saved_with_calibration,
    top1,
)

from backends.catalog import target
from backends.passes import accuracy
from backends.passes.quant.policy import resolve
from backends.sdk.errors import TerminalError

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ptq_digits_top1_drop_within_half_a_point(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    config = ptq_config(samples=300)
    config["calibration"]["method"] = "entropy"  # minmax per-channel drops 0.56 pp here (2 of 360 samples)
    out = run_quantize(config, model, tmp_path / "w")
    quantized = out.artifacts["model"]
    xs, labels = eval_set()
    float_acc, int8_acc = top1(model, xs, labels), top1(quantized, xs, labels)
    print(f"digits top-1: float {float_acc:.4f}, int8 {int8_acc:.4f} ({len(labels)} labelled samples)")
    assert float_acc > 0.95
    assert float_acc - int8_acc <= 0.005
    report = out.report
    assert report["mode"] == "ptq"
    assert report["calibration"]["samples_used"] == 300
    assert report["prepare"]["quant_pre_process"] == "applied"  # with symbolic shape inference (sympy)
    assert report["policy"]["activations"] == "uint8"
    assert report["policy"]["activations_from"] == "target cpu default"
    assert report["qdq_nodes"]["QuantizeLinear"] > 0
    assert report["size_ratio"] < 0.5
    counts = op_counts(quantized)
    assert counts.get("DequantizeLinear", 0) >= counts.get("Conv", 0) + counts.get("Gemm", 0)


def test_ptq_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    first = run_quantize(ptq_config(samples=32), model, tmp_path / "a").artifacts["model"]
    second = run_quantize(ptq_config(samples=32), model, tmp_path / "b").artifacts["model"]
    assert _sha(first) == _sha(second)


def test_fewer_calibration_samples_than_asked_is_a_clear_error(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    folder = tmp_path / "few"
    folder.mkdir()
    for i in range(5):
        np.save(folder / f"{i}.npy", np.zeros((1, 1, 8, 8), np.float32))
    with pytest.raises(TerminalError, match=r"has 5 samples, spec asks for 10"):
        run_quantize(ptq_config(samples=10), model, tmp_path / "w", calib=folder)


def test_seed_fixes_the_selection_and_samples_are_exact(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    a = run_quantize(ptq_config(samples=16), model, tmp_path / "a").report["calibration"]
    b = run_quantize(ptq_config(samples=16), model, tmp_path / "b").report["calibration"]
    config = ptq_config(samples=16)
    config["calibration"]["seed"] = 7
    c = run_quantize(config, model, tmp_path / "c").report["calibration"]
    assert a["sample_files"] == b["sample_files"] and len(a["sample_files"]) == 16
    assert a["sample_files"] != c["sample_files"] and len(c["sample_files"]) == 16


def test_signed_activations_default_to_symmetric(tmp_path: Path) -> None:
    policy = resolve({"quantization": ptq_config()}, target("rk3588"))
    assert policy.activations == "int8" and policy.activation_symmetric
    policy = resolve({"quantization": ptq_config()}, target("qualcomm-htp-v75"))
    assert policy.activations == "uint8" and not policy.activation_symmetric
    with pytest.raises(TerminalError, match="does not support uint8"):
        resolve({"quantization": ptq_config(activations="uint8")}, target("rk3588"))


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_other_calibration_methods_keep_accuracy(tmp_path: Path, method: str) -> None:
    model = digits_model(tmp_path)
    config = ptq_config(samples=100)
    config["calibration"]["method"] = method
    out = run_quantize(config, model, tmp_path / "w")
    xs, labels = eval_set()
    assert top1(model, xs, labels) - top1(out.artifacts["model"], xs, labels) <= 0.02
    assert out.report["policy"]["method"] == method


def test_explicit_rules_keep_nodes_in_float_and_say_which_rule(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    gemms = [n.name for n in onnx.load(str(model)).graph.node if n.op_type == "Gemm"]
    config = ptq_config(sensitive_layers={"keep": "fp32", "op_types": ["Gemm"], "first": 1})
    out = run_quantize(config, model, tmp_path / "w")
    kept = {k["node"]: k for k in out.report["kept"]}
    for name in gemms:
        assert kept[name]["precision"] == "fp32" and "op_types[0] 'Gemm'" in kept[name]["rule"]
    assert any(k["rule"] == "first 1" for k in kept.values())
    graph = onnx.load(str(out.artifacts["model"])).graph
    producers = {o: n.op_type for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.name in gemms:  # float weights, not dequantized int8
            assert producers.get(node.input[1]) != "DequantizeLinear"
            assert inits[node.input[1]].data_type == TensorProto.FLOAT


def test_a_rule_matching_nothing_is_an_error_naming_it(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    for rules, needle in (
        ({"nodes": ["/decoder/*"]}, "nodes[0] '/decoder/*'"),
        ({"op_types": ["Softmax"]}, "op_types[0] 'Softmax'"),
    ):
        with pytest.raises(TerminalError, match="matches no node") as err:
            run_quantize(ptq_config(sensitive_layers=rules), model, tmp_path / "w")
        assert needle in str(err.value)


def test_int16_keep_uses_16_bit_activations_and_runs(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    config = ptq_config(samples=64, sensitive_layers={"keep": "int16", "op_types": ["Conv"]})
    out = run_quantize(config, model, tmp_path / "w")
    graph = onnx.load(str(out.artifacts["model"])).graph
    zero_points = {n.input[2] for n in graph.node if n.op_type in _QDQ and len(n.input) > 2}
    zero_point_types = {t.data_type for t in graph.initializer if t.name in zero_points}
    assert TensorProto.UINT16 in zero_point_types and TensorProto.UINT8 in zero_point_types
    assert out.report["kept_summary"] == {"int16": 2}
    xs, labels = eval_set()
    assert top1(model, xs, labels) - top1(out.artifacts["model"], xs, labels) <= 0.01


def test_weights_and_activations_16_bit(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize(ptq_config(samples=32, activations="uint16", weights="int16"), model, tmp_path / "w")
    types = {t.data_type for t in onnx.load(str(out.artifacts["model"])).graph.initializer}
    assert TensorProto.UINT16 in types and TensorProto.INT16 in types
    xs, labels = eval_set()
    assert top1(out.artifacts["model"], xs, labels) == pytest.approx(top1(model, xs, labels), abs=0.003)


def _tiny_opset11(path: Path) -> Path:
    """A small conv model at opset 11: per-channel QDQ needs opset 13 (DequantizeLinear's axis)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return path


def test_opset_below_13_is_raised_before_per_channel(tmp_path: Path) -> None:
    model = _tiny_opset11(tmp_path / "tiny.onnx")
    out = run_quantize(ptq_config(samples=20), model, tmp_path / "w")
    assert out.report["prepare"]["opset_before"] == 11 and out.report["prepare"]["opset"] >= 13
    quantized = onnx.load(str(out.artifacts["model"]))
    axes = [
        a.i
        for n in quantized.graph.node
        if n.op_type == "DequantizeLinear"
        for a in n.attribute
        if a.name == "axis"
    ]
    assert axes, "per-channel weights carry an axis"
    ort.InferenceSession(str(out.artifacts["model"]), providers=["CPUExecutionProvider"])  # loads


def test_fp16_mode_keeps_io_types(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize({"mode": "fp16", "keep_io_types": True}, model, tmp_path / "a", calib=None)
    graph = onnx.load(str(out.artifacts["model"])).graph
    assert graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert any(t.data_type == TensorProto.FLOAT16 for t in graph.initializer)
    assert out.report["runs_on_host"] is True
    xs, labels = eval_set()
    assert top1(out.artifacts["model"], xs, labels) == pytest.approx(top1(model, xs, labels), abs=0.003)
    out = run_quantize({"mode": "fp16", "keep_io_types": False}, model, tmp_path / "b", calib=None)
    graph = onnx.load(str(out.artifacts["model"])).graph
    assert graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16


def test_fp16_mode_on_a_target_without_fp16_is_an_error(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    with pytest.raises(TerminalError, match="has no fp16"):
        run_quantize({"mode": "fp16"}, model, tmp_path / "w", calib=None, target_id="ethos-u55")


def test_qat_accepts_a_fully_quantized_model_and_reports_float_ops(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    full = run_quantize(ptq_config(samples=32, activations="int8"), model, tmp_path / "full").artifacts[
        "model"
    ]
    out = run_quantize({"mode": "qat"}, full, tmp_path / "qat", calib=None)
    assert out.report["float_compute_ops"] == [] and _sha(out.artifacts["model"]) == _sha(full)

    partial_config = ptq_config(
        samples=32, activations="int8", sensitive_layers={"keep": "fp32", "op_types": ["Gemm"]}
    )
    partial = run_quantize(partial_config, model, tmp_path / "partial").artifacts["model"]
    out = run_quantize({"mode": "qat"}, partial, tmp_path / "qat2", calib=None)
    assert {o["op_type"] for o in out.report["float_compute_ops"]} == {"Gemm"}
    assert out.report["warnings"]
    with pytest.raises(TerminalError, match="runs no float layers"):
        run_quantize({"mode": "qat"}, partial, tmp_path / "qat3", calib=None, target_id="ethos-u55")
    with pytest.raises(TerminalError, match="no QuantizeLinear/DequantizeLinear"):
        run_quantize({"mode": "qat"}, model, tmp_path / "qat4", calib=None)


def test_fp16_keep_on_the_host_cpu_stays_fp32_and_says_so(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize(
        ptq_config(samples=16, sensitive_layers={"keep": "fp16", "last": 1}), model, tmp_path / "w"
    )
    assert any("kept nodes stay fp32" in n for n in out.report["notes"])
    assert out.report["kept_summary"] == {"fp16": 1}


def test_a_rule_naming_a_node_folded_by_pre_processing_says_so(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    assert any(n.op_type == "BatchNormalization" for n in onnx.load(str(model)).graph.node)
    with pytest.raises(TerminalError, match="quant_pre_process"):
        run_quantize(ptq_config(sensitive_layers={"op_types": ["BatchNormalization"]}), model, tmp_path / "w")


def test_fp16_keep_on_an_npu_target_converts_the_kept_nodes(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    config = ptq_config(samples=32, sensitive_layers={"keep": "fp16", "op_types": ["Gemm"]})
    out = run_quantize(config, model, tmp_path / "w", target_id="qualcomm-htp-v75")
    assert any("converted to fp16" in n for n in out.report["notes"]), out.report["notes"]
    graph = onnx.load(str(out.artifacts["model"])).graph
    assert any(t.data_type == TensorProto.FLOAT16 for t in graph.initializer)
    assert graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    xs, labels = eval_set()
    assert top1(model, xs, labels) - top1(out.artifacts["model"], xs, labels) <= 0.01


def _row_bias_gemm(folder: Path, shared: bool) -> tuple[Path, Path]:
    """x [1, 16] -> MatMul by a [16, 8] weight + a [1, 8] row bias (what quant_pre_process fuses into a
    Gemm whose C is [1, 8], as it does in a real jax2tf export), then Relu; calibration samples beside."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    bias = numpy_helper.from_array((rng.standard_normal((1, 8)) * 3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["h"], name="add"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])]
    if shared:  # the bias read by another node too: the Gemm gets a copy of its own
        nodes.append(helper.make_node("Mul", ["b", "b"], ["b2"], name="square"))
        outputs.append(helper.make_tensor_value_info("b2", TensorProto.FLOAT, [1, 8]))
    graph = helper.make_graph(
        nodes,
        "row_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        outputs,
        [weight, bias],
    )
    folder.mkdir(parents=True)
    model = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    calib = folder / "calib"
    calib.mkdir()
    for i in range(16):
        np.save(calib / f"{i:02d}.npy", rng.standard_normal((1, 16)).astype(np.float32))
    return model, calib


@pytest.mark.parametrize("shared", [False, True])
def test_a_row_vector_gemm_bias_quantizes_per_channel(tmp_path: Path, shared: bool) -> None:
    """ONNX Runtime's quantizer raises on a per-channel Gemm whose bias is [1, N] ("truth value of an
    array ... ambiguous"); the prepared model carries it as the [N] it broadcasts the same as, and the
    int8 build computes what the float model does."""
    model, calib = _row_bias_gemm(tmp_path / "model", shared)
    out = run_quantize(ptq_config(16, per_channel=True), model, tmp_path / "q", calib=calib)
    (fused,) = out.report["prepare"]["gemm_biases_flattened"]  # the Gemm ORT fused from mm + add
    assert fused.startswith("mm")
    built = onnx.load(str(out.artifacts["model"]))
    assert {n.op_type for n in built.graph.node} >= {"Gemm", "QuantizeLinear", "DequantizeLinear"}
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    float_out = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    int8_out = accuracy.session(out.artifacts["model"]).run(None, {"x": x})  # by its Q/DQ math
    for want, got in zip(float_out, int8_out, strict=True):
        assert got.shape == want.shape
        step = (want.max() - want.min()) / 255  # one uint8 step of the output's range
        assert np.abs(got - want).max() <= 4 * step + 1e-6


def test_a_node_fused_by_pre_processing_is_kept_by_the_name_it_had(tmp_path: Path) -> None:
    """quant_pre_process fuses MatMul `mm` and its Add into a Gemm it names `mm/MatMulAddFusion`, a name
    the user's model never had; `sensitive_layers.nodes: [mm]` (what validation accepts, the model's own
    name) keeps that Gemm float, and the channel-range report names consumers the same way."""
    from backends.passes.quant.policy import spec_name

    assert spec_name("mm/MatMulAddFusion") == "mm" and spec_name("/model.22/Concat") == "/model.22/Concat"
    model, calib = _row_bias_gemm(tmp_path / "model", shared=False)
    config = ptq_config(16, sensitive_layers={"keep": "fp32", "nodes": ["mm"]})
    out = run_quantize(config, model, tmp_path / "q", calib=calib)
    kept = {k["node"]: k["rule"] for k in out.report["kept"]}
    (fused,) = kept
    assert fused.startswith("mm/") and fused.endswith("Fusion") and kept[fused] == "nodes[0] 'mm'"
    built = onnx.load(str(out.artifacts["model"]))
    gemm = next(n for n in built.graph.node if n.op_type == "Gemm")
    weights = {t.name: t for t in built.graph.initializer}
    assert weights[gemm.input[1]].data_type == TensorProto.FLOAT  # kept float: no int8 weight behind it


def test_a_bias_two_convolutions_share_is_copied_under_a_name_no_tensor_has(tmp_path: Path) -> None:
    """Two Convs read one bias `b`, and the second writes a tensor named `b0` (tf2onnx names outputs
    after the scope its shared bias has: basic-pitch's `.../conv1d_25` and `.../conv1d_252`). ONNX
    Runtime's quantizer copies a shared bias itself, naming the copies `b0`, `b1`... from the
    initializers alone: the int8 model then reads that Conv's output as a constant. The prepared model
    gives each Conv its own bias first."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2", "b"], ["b0"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b0"], ["y"], name="cat", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "shared_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )
    model, calib = saved_with_calibration(graph, 17, tmp_path / "model", (1, 3, 8, 8))
    out = run_quantize(ptq_config(8, per_channel=True), model, tmp_path / "q", calib=calib)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = accuracy.session(out.artifacts["model"]).run(None, {"x": x})  # by its Q/DQ math
    step = (want.max() - want.min()) / 255  # one uint8 step of the output's range
    assert got.shape == want.shape and np.percentile(np.abs(got - want), 99) <= 4 * step
    assert out.report["prepare"]["biases_unshared"] == 1
