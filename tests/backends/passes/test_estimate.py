"""The roofline estimate: precision choice, MACs, and fallback-heavy placements estimating slower."""

from __future__ import annotations

import numpy as np
import pytest
from npu_models import imported
from onnx import TensorProto, helper, numpy_helper

from backends.catalog import target
from backends.passes import estimate as E
from backends.passes import placement as P
from backends.passes.facts import analyse


def test_precision_follows_quantization_and_target() -> None:
    rk = target("rk3588")
    none = E.precision_for(rk, {"mode": "none"})
    assert none.npu_dtype == "fp16" and "assume" in none.note and none.peak_tops == rk.peak_tops_fp16
    ptq = E.precision_for(rk, {"mode": "ptq", "weights": "int8", "activations": "int8"})
    assert ptq.npu_dtype == "int8" and ptq.peak_tops == rk.peak_tops_int8 and ptq.activation_bytes == 1
    a16 = E.precision_for(target("qualcomm-htp-v75"), {"mode": "ptq", "activations": "uint16"})
    assert a16.npu_dtype == "int16" and a16.activation_bytes == 2 and a16.note
    assert E.precision_for(rk, {"mode": "ptq"}).activations == rk.default_activation


def test_conv_macs() -> None:
    w = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    facts = analyse(model)
    assert E.node_cost(model.graph.node[0], facts).macs == 8 * 16 * 16 * 3 * 3 * 3


def test_mostly_fallback_estimates_far_slower_than_fully_placed() -> None:
    model = imported("rec")
    facts = analyse(model)
    names = [facts.names[i] for i in facts.runtime_nodes()]
    tgt = target("rk3588")
    all_npu = P.compute(
        model,
        tgt,
        {"mode": "ptq"},
        facts=facts,
        device_map=dict.fromkeys(names, "NPU"),
        device_map_source="synthetic",
    )
    # most nodes on the CPU, every fifth on the NPU: many crossings and the CPU's throughput
    mostly_cpu = {n: ("NPU" if k % 5 == 0 else "CPU") for k, n in enumerate(names)}
    fallback = P.compute(
        model, tgt, {"mode": "ptq"}, facts=facts, device_map=mostly_cpu, device_map_source="synthetic"
    )
    fast, slow = all_npu["estimate"]["latency_ms"], fallback["estimate"]["latency_ms"]
    print(f"\nrec on rk3588: fully placed {fast} ms, 80% fallback {slow} ms ({slow / fast:.0f}x)")
    assert slow > 5 * fast
    assert fallback["estimate"]["transfer_ms"] > 0 and all_npu["estimate"]["transfer_ms"] == 0
    assert "roofline" in all_npu["estimate"]["detail"]


@pytest.mark.parametrize("tid", ["rk3588", "qualcomm-htp-v75", "cpu"])
def test_estimate_is_positive_and_partition_times_add_up(tid: str) -> None:
    report = P.compute(imported("cls"), target(tid), {"mode": "ptq"})
    est = report["estimate"]
    parts = sum(p["ms"] for p in est["partitions"])
    assert est["latency_ms"] == pytest.approx(parts + est["transfer_ms"], rel=1e-3)
