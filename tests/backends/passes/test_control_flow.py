"""Loop and Scan bodies are walked: their nodes are listed and their MACs billed once per iteration."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.catalog import target
from backends.passes import placement


def _matmul_body(name: str, inputs: list[onnx.ValueInfoProto], x: str, outputs: list[str]) -> onnx.GraphProto:
    w = numpy_helper.from_array(np.full((16, 16), 0.01, np.float32), f"{name}_w")
    nodes = [
        helper.make_node("MatMul", [x, f"{name}_w"], [f"{name}_mm"], name=f"{name}_mm"),
        helper.make_node("Relu", [f"{name}_mm"], [outputs[-1]], name=f"{name}_relu"),
    ]
    if len(outputs) > 1:
        nodes.insert(0, helper.make_node("Identity", [inputs[1].name], [outputs[0]], name=f"{name}_cond"))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs[-1:]]
    if len(outputs) > 1:
        outs.insert(0, helper.make_tensor_value_info(outputs[0], TensorProto.BOOL, []))
    return helper.make_graph(nodes, name, inputs, outs, [w])


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], out_shape: list[int]
) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_loop_body_macs_times_a_constant_trip_count() -> None:
    trips = 5
    body_inputs = [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
    ]
    body = _matmul_body("step", body_inputs, "v", ["c_out", "v_out"])
    inits = [
        numpy_helper.from_array(np.array(trips, np.int64), "M"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    loop = helper.make_node("Loop", ["M", "cond", "x"], ["y"], name="loop", body=body)
    report = placement.compute(_model([loop], inits, [4, 16]), target("cpu"), {"mode": "none"})
    per_iteration = 4 * 16 * 16  # [4,16] @ [16,16], computed here
    assert report["coverage"]["macs"]["total"] == trips * per_iteration
    inside = [n["name"] for n in report["nodes"] if n.get("inside") == "loop"]
    assert inside == ["loop/body/step_cond", "loop/body/step_mm", "loop/body/step_relu"]


def test_scan_body_runs_once_per_slice() -> None:
    state = helper.make_tensor_value_info("s", TensorProto.FLOAT, None)
    row = helper.make_tensor_value_info("r", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.full((16, 16), 0.01, np.float32), "row_w")
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["r", "row_w"], ["rm"], name="row_mm"),
            helper.make_node("Add", ["s", "rm"], ["s_out"], name="row_add"),
        ],
        "row",
        [state, row],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, None)],
        [w],
    )
    init = numpy_helper.from_array(np.zeros((16,), np.float32), "s0")
    scan = helper.make_node("Scan", ["s0", "x"], ["y"], name="scan", body=body, num_scan_inputs=1)
    report = placement.compute(_model([scan], [init], [16]), target("cpu"), {"mode": "none"})
    assert report["coverage"]["macs"]["total"] == 4 * (16 * 16)  # 4 rows of [16] @ [16,16]
    assert report["coverage"]["nodes"]["total"] == 3
