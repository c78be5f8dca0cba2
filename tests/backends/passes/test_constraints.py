"""Constraint clauses of the real op tables, evaluated against small graphs whose facts are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.catalog import OpSupport, op_table
from backends.passes import constraints as C
from backends.passes.facts import analyse

INT8 = C.Context(npu_dtype="int8", activations="uint8", weights="int8", quantized=True, opset=13)
FP32 = C.Context(npu_dtype="fp32", activations="float32", weights="float32", quantized=False, opset=13)


def _model(
    nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], inits: dict[str, np.ndarray]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _verdicts(
    text: str, model: onnx.ModelProto, ctx: C.Context = INT8, op: str | None = None
) -> list[C.Verdict]:
    facts = analyse(model)
    node = next(n for n in model.graph.node if op is None or n.op_type == op)
    return C.evaluate(OpSupport(node.op_type, "partial", text), node, facts, ctx)


def _status(text: str, model: onnx.ModelProto, ctx: C.Context = INT8) -> list[str]:
    return [v.status for v in _verdicts(text, model, ctx)]


def _add(rank: int) -> onnx.ModelProto:
    shape = [1, 4, 8, 8][-rank:]
    return _model(
        [helper.make_node("Add", ["x", "b"], ["y"])], {"x": shape}, {"b": np.ones(shape[-1:], np.float32)}
    )


def test_split_keeps_bracketed_semicolons_and_strips_prefixes() -> None:
    text = "[mapped via TFLite; derived] 2D pooling only | AVERAGE_POOL_2D: 32-bit feature-maps are not supported."
    assert C.split_clauses(text) == (
        "2D pooling only",
        "AVERAGE_POOL_2D: 32-bit feature-maps are not supported",
    )
    assert C.split_clauses("doc: fp16 supported since 1.18.0; code(derived): input rank 3/4/5 only") == (
        "fp16 supported since 1.18.0",
        "input rank 3/4/5 only",
    )
    assert C.split_clauses(
        "MLProgram: Input B must be constant.; NeuralNetwork: Input B should be constant."
    ) == ("Input B must be constant",)


def test_rknn_add_requires_4d_and_a_supported_dtype() -> None:
    row = op_table("rockchip-rknpu2").ops["Add"].constraints
    assert "failed" in _status(row, _add(3))
    assert "failed" not in _status(row, _add(4))
    fp32 = _status("NPU: int8/fp16", _add(4), FP32)
    assert fp32 == ["failed"]
    assert _status("fp16 only (no int8)", _add(4), INT8) == ["failed"]


def test_pooling_limits_kernel_and_spatial_rank() -> None:
    pool = _model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[8, 8])], {"x": [1, 3, 16, 16]}, {}
    )
    verdicts = {
        v.clause: v for v in _verdicts(op_table("rockchip-rknpu2").ops["AveragePool"].constraints, pool)
    }
    assert verdicts["kernel<=7"].status == "failed"
    assert verdicts["2-D"].status == "ok"  # 2-D pooling means a 4-D tensor
    assert verdicts["stride<=8"].status == "ok"


def test_softmax_axis_and_global_pool_window() -> None:
    soft = _model([helper.make_node("Softmax", ["x"], ["y"], axis=2)], {"x": [1, 4, 5]}, {})
    assert _status("axis 1 or 3 (channel/width) only", soft) == ["failed"]
    soft4 = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": [1, 4, 5, 6]}, {})
    assert _status("axis 1 or 3 (channel/width) only", soft4) == ["ok"]
    gap = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": [1, 8, 12, 80]}, {})
    assert _status("PDF lists H,W in (0,7] (kernel = whole H x W)", gap) == ["failed"]


def test_constant_values_are_checked() -> None:
    def pow_model(e: float) -> onnx.ModelProto:
        return _model(
            [helper.make_node("Pow", ["x", "e"], ["y"])], {"x": [1, 4]}, {"e": np.array(e, np.float32)}
        )

    assert _status("exponent only 0, 1, 2, 3, 0.5, -0.5", pow_model(-0.5)) == ["ok"]
    assert _status("exponent only 0, 1, 2, 3, 0.5, -0.5", pow_model(4.0)) == ["failed"]

    def clip(lo: float, hi: float) -> onnx.ModelProto:
        inits = {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        return _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": [1, 4]}, inits)

    assert _status("documented as ReLU6 ([0,6]) clip", clip(0, 6)) == ["ok"]
    assert _status("documented as ReLU6 ([0,6]) clip", clip(-1, 1)) == ["failed"]


def test_dynamic_inputs_fail_constant_requirements() -> None:
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "st", "en"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
            helper.make_tensor_value_info("st", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2], np.int64), "en")],
    )
    dynamic = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    verdicts = _verdicts("starts/ends/axes/steps must be constant initializers (no dynamic slice)", dynamic)
    assert [v.status for v in verdicts] == ["failed"]
    assert "st" in verdicts[0].detail


def test_htp_matmul_dtype_pairs_follow_the_quantization() -> None:
    text = "Supported input data types on HTP backend: (uint8, uint8), (uint8, uint16), (uint16, uint8)"
    weights = {"w": np.ones((4, 4), np.float32)}
    mm = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [2, 4]}, weights)
    assert _status(text, mm, INT8) == ["ok"]  # uint8 activations by int8 constant weights: QNN validates it
    int8_acts = C.Context(npu_dtype="int8", activations="int8", weights="int8", quantized=True, opset=13)
    assert _status(text, mm, int8_acts) == ["failed"]  # no pair starts with int8 activations
    a16w8 = C.Context(npu_dtype="int16", activations="uint16", weights="uint8", quantized=True, opset=13)
    assert _status(text, mm, a16w8) == ["ok"]


def test_unparsed_clause_is_reported_never_guessed() -> None:
    verdicts = _verdicts("per-perm size/alignment limits (e.g. perm [0,1,3,2] needs H%16==0)", _add(4))
    assert [v.status for v in verdicts] == ["not_evaluated"]
    assert verdicts[0].text().startswith("not evaluated: per-perm size/alignment limits")


@pytest.mark.parametrize("table_id", ["qualcomm-qnn-htp", "rockchip-rknpu2", "android-nnapi-ort", "cpu"])
def test_every_row_of_a_table_evaluates_without_crashing(table_id: str) -> None:
    """Robustness: every clause of a real table on a plain 4-D node returns a verdict."""
    model = _add(4)
    facts = analyse(model)
    node = model.graph.node[0]
    for row in op_table(table_id).ops.values():
        for verdict in C.evaluate(row, node, facts, INT8):
            assert verdict.status in ("ok", "failed", "not_evaluated", "info")


def _qdq_matmul(weights: np.ndarray) -> onnx.ModelProto:
    """uint8 activations by int8 symmetric constant weights, as the QNN quantize pass writes them."""
    scale = float(np.abs(weights).max() / 127)
    q = np.clip(np.round(weights / scale), -127, 127).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw"),
        helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm"),
        helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"], name="qy"),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"], name="dqy"),
    ]
    inits = {
        "xs": np.array(0.02, np.float32),
        "xz": np.array(128, np.uint8),
        "wq": q,
        "ws": np.array(scale, np.float32),
        "wz": np.array(0, np.int8),
        "ys": np.array(0.1, np.float32),
        "yz": np.array(128, np.uint8),
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, weights.shape[0]])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 32, weights.shape[1]])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_the_htp_matmul_pairs_agree_with_qnns_own_validation_on_constant_weights(tmp_path: Path) -> None:
    """The table's (uint8, uint8)-style pairs are for two activations: QNN's validation takes a MatMul
    of uint8 activations by int8 constant weights on the HTP, and so must the table's verdict."""
    from backends.qnn import driver
    from backends.qnn.validation import parse

    model = _qdq_matmul(np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32))
    onnx.save(model, str(tmp_path / "model.onnx"))
    driver.call(
        {"mode": "validate", "model": "model.onnx", "htp_arch": "75", "soc_model": "57"},
        tmp_path,
        tmp_path / "native.log",
    )
    found = parse((tmp_path / "native.log").read_text(errors="replace"))
    assert found.verdicts["mm"].passed, found.verdicts["mm"]
    row = op_table("qualcomm-qnn-htp").lookup("MatMul", "")
    assert row is not None
    verdicts = _verdicts(row.constraints, model, INT8, op="MatMul")
    assert verdicts and all(v.status != "failed" for v in verdicts), verdicts
    # two activations still need a listed pair: int8 x int8 activations are not one
    both = C.Context(npu_dtype="int8", activations="int8", weights="int8", quantized=True, opset=13)
    dynamic = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": [1, 4, 8], "b": [1, 8, 4]}, {})
    assert "failed" in [v.status for v in _verdicts(row.constraints, dynamic, both)]
