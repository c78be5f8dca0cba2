"""Short Q/DQ names: the quantizer's own names shrink, the float model's names and the numbers do not change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import DIGITS_CALIB, digits_model, eval_set, ptq_config, run_quantize

from backends.passes.quant import qdq_names

_QDQ = ("QuantizeLinear", "DequantizeLinear")


class _Reader:
    """ONNX Runtime's calibration reader over the digits calibration folder."""

    def __init__(self, count: int) -> None:
        files = sorted(DIGITS_CALIB.glob("*.npy"))[:count]
        self._feeds = iter([{"image": np.load(f).astype(np.float32).reshape(1, 1, 8, 8)} for f in files])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def _ort_qdq(tmp_path: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(float digits, its QDQ model straight out of ONNX Runtime's quantize_static, names untouched)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    float_path = digits_model(tmp_path)
    out = tmp_path / "qdq.onnx"
    quantize_static(
        str(float_path),
        str(out),
        _Reader(32),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    return onnx.load(str(float_path)), onnx.load(str(out))


def _run(model: onnx.ModelProto, xs: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(session.run(None, {"image": x})[0]) for x in xs]


def test_compact_keeps_float_names_and_outputs_and_shrinks_the_file(tmp_path: Path) -> None:
    float_model, qdq = _ort_qdq(tmp_path)
    before = onnx.ModelProto()
    before.CopyFrom(qdq)
    renamed = qdq_names.compact(qdq, qdq_names.source_names(float_model))
    assert renamed > 0
    onnx.checker.check_model(qdq, full_check=True)
    kept = {n.name for n in float_model.graph.node}
    assert {n.name for n in qdq.graph.node if n.op_type not in _QDQ} <= kept
    assert all(
        n.name.startswith(("Q", "DQ")) and len(n.name) <= 6 for n in qdq.graph.node if n.op_type in _QDQ
    )
    assert [v.name for v in qdq.graph.input] == [v.name for v in float_model.graph.input]
    assert [v.name for v in qdq.graph.output] == [v.name for v in float_model.graph.output]
    xs, _ = eval_set()
    for a, b in zip(_run(before, xs[:20]), _run(qdq, xs[:20]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert qdq.ByteSize() < before.ByteSize()


def test_names_used_inside_a_subgraph_are_kept() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "x_scale_long_name"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero_point_long_name"),
    ]
    q = helper.make_node("QuantizeLinear", ["x", "x_scale_long_name", "x_zero_point_long_name"], ["xq_long"])
    dq = helper.make_node(
        "DequantizeLinear", ["xq_long", "x_scale_long_name", "x_zero_point_long_name"], ["x_dq_output"]
    )
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x_dq_output"], ["b"])],
        "branch",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    cond_node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph([q, dq, cond_node], "g", [x, cond], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    renamed = qdq_names.compact(model, {"x", "cond", "y"})
    assert model.graph.node[1].output[0] == "x_dq_output"  # read by the If body by name
    assert model.graph.node[0].input[1] == "Q0:s" and renamed == 3
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run(None, {"x": np.array([1.0, 2.0], np.float32), "cond": np.array(True)})[0]
    np.testing.assert_allclose(out, [1.0, 2.0], atol=0.1)


def test_the_ptq_artifact_carries_short_names_and_reports_them(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize(ptq_config(samples=32), model, tmp_path / "w")
    graph = onnx.load(str(out.artifacts["model"])).graph
    names = {t for n in graph.node for t in (*n.input, *n.output)}
    assert not any(t.endswith(("_quantized", "_DequantizeLinear_Output", "_scale")) for t in names)
    assert out.report["renamed_qdq_names"] > 0
    float_nodes = {n.name for n in onnx.load(str(model)).graph.node}
    assert {n.name for n in graph.node if n.op_type not in _QDQ} <= float_nodes | {""}
