"""Placement reports on the real models for every catalog target; partitions and crossings on known graphs."""

from __future__ import annotations

import json

import onnx
import pytest
from npu_models import LIGHT_MODELS, imported
from onnx import TensorProto, helper

from backends.catalog import target, targets
from backends.passes import placement as P
from backends.passes.facts import analyse

MODELS = ["det", "rec", "cls", *LIGHT_MODELS]


@pytest.mark.parametrize("name", MODELS)
def test_placement_report_for_every_target(name: str) -> None:
    model = imported(name)
    facts = analyse(model)
    runtime = facts.runtime_nodes()
    assert runtime, "a real model has runtime nodes"
    for tid, tgt in sorted(targets().items()):
        report = P.compute(model, tgt, {"mode": "ptq"}, facts=facts)
        nodes = report["nodes"]
        assert len(nodes) == len(runtime), tid
        assert {n["device"] for n in nodes} <= {"NPU", "CPU"}
        for n in nodes:
            if n["device"] == "CPU" and tgt.npu_cores > 0:
                assert n["reason"], f"{tid}: {n['name']} falls back without a reason"
            assert n["source"].startswith("op-table ")
        cov = report["coverage"]["nodes"]
        assert cov["npu"] == sum(1 for n in nodes if n["device"] == "NPU")
        assert sum(p["nodes"] for p in report["partitions"]) == len(nodes)
        assert report["estimate"]["latency_ms"] > 0
        json.dumps(report)  # JSON-able


def test_report_is_deterministic_and_names_failed_constraints() -> None:
    model = imported("rec")
    a = P.compute(model, target("rk3588"), {"mode": "ptq"})
    b = P.compute(imported("rec"), target("rk3588"), {"mode": "ptq"})
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    divs = [n for n in a["nodes"] if n["op_type"] == "Div" and n["device"] == "CPU"]
    assert divs and any("fp16 only" in f for f in divs[0]["failed"])
    assert a["source"] == f"op-table rockchip-rknpu2@{target('rk3588').op_table_version}"
    print(
        f"\nrec on rk3588 (ptq): {a['coverage']['nodes']['npu']}/{a['coverage']['nodes']['total']} nodes on the NPU"
    )


def _chain() -> onnx.ModelProto:
    """x -> a(Relu) -> b(Sigmoid) -> c(Add a, b) -> d(Relu): a skip edge a -> c around b."""
    nodes = [
        helper.make_node("Relu", ["x"], ["ta"], name="a"),
        helper.make_node("Sigmoid", ["ta"], ["tb"], name="b"),
        helper.make_node("Add", ["ta", "tb"], ["tc"], name="c"),
        helper.make_node("Relu", ["tc"], ["y"], name="d"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_backend_map_wins_and_partitions_stay_acyclic() -> None:
    model = _chain()
    devices = {"a": "NPU", "b": "CPU", "c": "NPU", "d": "NPU"}
    report = P.compute(
        model, target("rk3588"), {"mode": "ptq"}, device_map=devices, device_map_source="test-report"
    )
    assert report["source"] == "test-report"
    assert [n["device"] for n in report["nodes"]] == ["NPU", "CPU", "NPU", "NPU"]
    # a and c are both NPU and connected, but merging them would make a cycle through b: 3 partitions
    parts = [n["partition"] for n in report["nodes"]]
    assert parts[0] != parts[2] and parts[2] == parts[3]
    assert len(report["partitions"]) == 3
    cross = {(c["tensor"], c["direction"]) for c in report["crossings"]}
    assert cross == {("ta", "NPU->CPU"), ("tb", "CPU->NPU")}
    assert all(c["bytes"] == 4 * 8 * 8 * 1 for c in report["crossings"])  # int8 activations
    m = P.measurements(report)
    assert m["fallback_partitions"]["value"] == 1
    assert m["npu_coverage"]["value"] == pytest.approx(0.75)
    assert {v["evidence"] for v in m.values()} == {"estimated"}


def test_constant_subgraphs_are_not_placed() -> None:
    model = imported("rec")
    facts = analyse(model)
    assert facts.const_nodes, "rec has Constant and shape-computation nodes"
    report = P.compute(model, target("qualcomm-htp-v75"), {"mode": "ptq"}, facts=facts)
    placed = {n["name"] for n in report["nodes"]}
    assert placed.isdisjoint(report["constant_nodes"])
    assert not any(n["op_type"] in ("Constant", "Shape") for n in report["nodes"])
    assert all(
        facts.static_shape(o) is not None for i in facts.runtime_nodes() for o in facts.nodes[i].output
    )


def test_unknown_support_is_not_guessed() -> None:
    """LRN has no data in the Intel NPU table: CPU, with the reason saying it was not guessed."""
    report = P.compute(imported("light_bvlc_alexnet"), target("intel-npu"), {"mode": "none"})
    lrn = [n for n in report["nodes"] if n["op_type"] == "LRN"]
    assert lrn and all(n["support"] == "unknown" and n["device"] == "CPU" for n in lrn)
    assert all("not guessed" in n["reason"] for n in lrn)


def test_a_target_that_cannot_split_a_model_has_coverage_one_or_zero() -> None:
    """From the catalog fact, not the target's name: the same target with `splits_model` removed gives
    the table's fraction; with it, one node the NPU cannot run keeps the whole model on the CPU."""
    from dataclasses import replace

    model = imported("cls")
    facts = analyse(model)
    npu = target("intel-npu")
    assert npu.extra["splits_model"] is False
    splitting = replace(npu, extra={k: v for k, v in npu.extra.items() if k != "splits_model"})
    split = P.compute(model, splitting, {"mode": "ptq"}, facts=facts)
    fraction = split["coverage"]["nodes"]
    assert 0 < fraction["npu"] < fraction["total"], "the op table leaves some nodes of this model off the NPU"
    report = P.compute(model, npu, {"mode": "ptq"}, facts=facts)
    assert report["coverage"]["nodes"]["fraction"] == 0.0
    assert report["crossings"] == [] and {p["device"] for p in report["partitions"]} == {"CPU"}
    was_on_npu = {n["name"] for n in split["nodes"] if n["device"] == "NPU"}
    assert all("cannot split a model" in n["reason"] for n in report["nodes"] if n["name"] in was_on_npu)
    for tid, tgt in sorted(targets().items()):
        if tgt.extra.get("splits_model") is False:
            cov = P.compute(model, tgt, {"mode": "ptq"}, facts=facts)["coverage"]["nodes"]["fraction"]
            assert cov in (0.0, 1.0), tid
