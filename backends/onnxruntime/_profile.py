"""ONNX Runtime's per-node trace mapped back to the ONNX nodes of the deployed model.

The .ort artifact runs an optimized graph: fused nodes ("fused /fc1/Gemm"), NCHWc convolutions named
after the tensor they now produce ("r1_nchwc"), QDQ groups folded into QLinear kernels, and layout
reorders ORT inserted itself. Each runtime node is tied to the deployed model by what it is named after
(an ONNX node or tensor) or, failing that, by the ONNX tensors it produces; from those anchors the
ONNX producers are walked back until a tensor the optimized graph still holds, so a fused kernel
claims every ONNX node it swallowed. A node anchored to nothing is ORT's own (a reorder) and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from backends.passes.facts import load_light
from backends.sdk.errors import TerminalError

GRAPH_NODES = {
    "InferenceSession": frozenset({"model"}),
    "Model": frozenset({"graph"}),
    "Graph": frozenset({"nodes"}),
    "Node": frozenset({"name", "op_type", "inputs", "outputs"}),
}
"""The fields of the .ort the mapping reads: its weights and resolver stay unread."""


def ort_graph(artifact: Path) -> list[dict[str, Any]]:
    """The .ort file's nodes as {"name", "op_type", "inputs", "outputs"} (text)."""
    from backends.onnxruntime import _ortformat

    try:
        session = _ortformat.read(artifact.read_bytes(), GRAPH_NODES)
    except (OSError, ValueError, KeyError) as exc:
        raise TerminalError(f"cannot read the graph of {artifact.name}: {exc}") from exc
    nodes = ((session.get("model") or {}).get("graph") or {}).get("nodes") or []
    return [
        {
            "name": _text(n.get("name")),
            "op_type": _text(n.get("op_type")),
            "inputs": [_text(t) for t in n.get("inputs") or []],
            "outputs": [_text(t) for t in n.get("outputs") or []],
        }
        for n in nodes
    ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def onnx_nodes_of(runtime_nodes: list[dict[str, Any]], model: onnx.ModelProto) -> dict[str, list[str]]:
    """Runtime node name -> the deployed model's node names it executes (empty: inserted by ORT)."""
    graph = model.graph
    by_name = {n.name: n for n in graph.node}
    producer = {t: n.name for n in graph.node for t in n.output if t}
    anchors: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for rn in runtime_nodes:  # first what a node is named after: it beats a reorder's output name
        found = _named_anchors(rn["name"], by_name, producer)
        if found:
            anchors[rn["name"]] = found
            claimed.update(found)
    for rn in runtime_nodes:
        if rn["name"] not in anchors:
            anchors[rn["name"]] = [t for t in rn["outputs"] if t in producer and t not in claimed]
            claimed.update(anchors[rn["name"]])
    visible = set(claimed) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    visible |= {t for n in graph.node if n.op_type == "Constant" for t in n.output}  # folded by ORT
    visible |= {t for rn in runtime_nodes for t in rn["inputs"] if t in producer}
    order = {n.name: i for i, n in enumerate(graph.node)}
    made_by = {t: rn for rn in runtime_nodes for t in rn["outputs"]}
    taken: set[str] = set()
    out: dict[str, list[str]] = {rn["name"]: [] for rn in runtime_nodes}
    for rn in runtime_nodes:
        if not anchors[rn["name"]]:
            continue
        found = sorted(
            _walk_back(anchors[rn["name"]], by_name, producer, visible, taken), key=order.__getitem__
        )
        region = _runtime_region(rn, made_by, anchors, producer)
        for runtime_name, names in _align(found, region, by_name, producer).items():
            out[runtime_name] = sorted({*out[runtime_name], *names})
    return out


def _runtime_region(
    anchor: dict[str, Any],
    made_by: dict[str, dict[str, Any]],
    anchors: dict[str, list[str]],
    producer: dict[str, str],
) -> list[dict[str, Any]]:
    """The anchored runtime node and the unanchored ones feeding it through tensors ORT created (its
    NCHWc convolutions, reorders), in execution order: together they run the ONNX nodes the anchor's
    walk found."""
    region, stack, seen = [anchor], list(anchor["inputs"]), {anchor["name"]}
    while stack:
        t = stack.pop()
        rn = made_by.get(t)
        if rn is None or t in producer or rn["name"] in seen or anchors.get(rn["name"]):
            continue
        seen.add(rn["name"])
        region.append(rn)
        stack.extend(rn["inputs"])
    position = {id(rn): i for i, rn in enumerate(made_by.values())}
    return sorted(region, key=lambda rn: position.get(id(rn), len(position)))


def _align(
    onnx_names: list[str],
    region: list[dict[str, Any]],
    by_name: dict[str, onnx.NodeProto],
    producer: dict[str, str],
) -> dict[str, list[str]]:
    """ONNX nodes (in graph order) onto the region's runtime nodes: each to the next runtime node of its
    op type (FusedConv, QLinearConv and Conv all run a Conv); one with no such node (a BatchNormalization
    or Relu fused away, a DequantizeLinear folded in) to the runtime node that runs its producer, or to
    the region's anchor."""
    out: dict[str, list[str]] = {rn["name"]: [] for rn in region}
    home: dict[str, str] = {}
    cursor = 0
    for name in onnx_names:
        op = by_name[name].op_type
        pick = next((i for i in range(cursor, len(region)) if op in str(region[i]["op_type"])), None)
        if pick is not None:
            cursor = pick + 1
            home[name] = region[pick]["name"]
        else:
            feeders = [producer[t] for t in by_name[name].input if producer.get(t) in home]
            home[name] = home[feeders[0]] if feeders else region[-1]["name"]
        out[home[name]].append(name)
    return out


def _named_anchors(name: str, by_name: dict[str, onnx.NodeProto], producer: dict[str, str]) -> list[str]:
    candidates = [name, name.split(" ", 1)[-1], name.rsplit("_", 1)[0]]
    for candidate in candidates:
        if candidate in by_name:
            return [t for t in by_name[candidate].output if t]
        if candidate in producer:
            return [candidate]
    return []


def _walk_back(
    anchors: list[str],
    by_name: dict[str, onnx.NodeProto],
    producer: dict[str, str],
    visible: set[str],
    taken: set[str],
) -> list[str]:
    """ONNX nodes between `anchors` and the tensors the optimized graph still holds, each billed once."""
    names: list[str] = []
    stack = [producer[t] for t in anchors if t in producer]
    while stack:
        name = stack.pop()
        if name in taken:
            continue
        taken.add(name)
        names.append(name)
        for t in by_name[name].input:
            if t and t not in visible and t in producer:
                stack.append(producer[t])
    return sorted(names)


RUNTIME_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyFromHost", "MemcpyToHost"})
"""Ops ORT inserts itself (layout reorders, copies between providers): no ONNX node to map them to. Any
other layer without ONNX nodes is one the mapping could not place, and stays `inserted: false`."""

INTEGER_KERNELS = ("QLinear", "ConvInteger", "MatMulInteger", "DynamicQuantize")


def executed_precision(op_type: str, output_type: Any) -> str | None:
    """What the kernel computed in: an integer kernel is int8 whatever it outputs; otherwise the
    element type of its first output as ORT's trace names it (float -> fp32)."""
    if op_type.startswith(INTEGER_KERNELS):
        return "int8"
    names = {"float": "fp32", "float16": "fp16", "double": "fp64"}
    return names.get(str(output_type), str(output_type)) if output_type else None


PROBE_NODES = 32
"""No-op nodes of each kind in the profiled probe: enough events per run that ORT's whole-microsecond
durations average out."""


def probe_model(nodes: int = PROBE_NODES) -> bytes:
    """A probe benchprog runs beside the model (bench_ort): three chains of `nodes` no-op nodes on one
    element, so their events are ORT's per-node bookkeeping and no kernel work, in three shapes that
    tell its parts apart: Identity on [1] (2 tensors, 2 dims), a 4-input Sum on [1] (5 tensors, 5 dims)
    and Identity on [1, 1, 1, 1, 1, 1] (2 tensors, 12 dims). With nodes=1 it is the baseline whose
    unprofiled time, beside the full probe's, splits a run's fixed cost from its per-node dispatch."""
    from onnx import TensorProto, helper

    graph_nodes = []
    for i in range(nodes):
        x, y = ("x", "y") if i == 0 else (f"s{i - 1}", f"y{i - 1}")
        graph_nodes.append(helper.make_node("Identity", [x], [f"i{i}"], name=f"probe_identity_{i}"))
        graph_nodes.append(helper.make_node("Sum", [f"i{i}"] * 4, [f"s{i}"], name=f"probe_sum_{i}"))
        graph_nodes.append(helper.make_node("Identity", [y], [f"y{i}"], name=f"probe_rank6_{i}"))
    last = nodes - 1
    graph = helper.make_graph(
        graph_nodes,
        "profiler_probe",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1] * 6),
        ],
        [
            helper.make_tensor_value_info(f"s{last}", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info(f"y{last}", TensorProto.FLOAT, [1] * 6),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, {"nodes": str(len(graph_nodes))})
    return model.SerializeToString(deterministic=True)


def profiler_cost_us(layer: dict[str, Any], calibration: dict[str, Any] | None) -> float:
    """The profiler's own share of a node's kernel event: base + per_tensor x tensors + per_dim x dims
    (the tensors ORT formatted for the event, and their dimensions)."""
    if not calibration:
        return 0.0
    cost = float(calibration["base_us"]) + float(calibration["per_tensor_us"]) * int(
        layer.get("tensors") or 0
    )
    return cost + float(calibration.get("per_dim_us") or 0.0) * int(layer.get("dims") or 0)


def runtime_layers(trace: dict[str, Any], artifact: Path, model_path: Path) -> list[dict[str, Any]]:
    """benchprog's trace layers with the ONNX nodes each one executed and the device that ran it. With
    the probe's calibration, `time_ms` is ORT's kernel time less the profiler's cost for that node
    (never below zero) and `raw_time_ms` what ORT reported."""
    graph = ort_graph(artifact)
    known = {n["name"] for n in graph}
    try:
        model = load_light(model_path)  # node names only: the weights stay unread
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError, ValueError, DecodeError) as exc:
        raise TerminalError(f"cannot read {model_path.name}: {exc}") from exc
    mapping = onnx_nodes_of(graph, model)
    calibration = trace.get("calibration")
    layers = []
    for layer in trace.get("layers") or []:
        name = str(layer["name"])
        provider = str(layer.get("provider") or "")
        raw_us, cost_us = float(layer["time_us"]), profiler_cost_us(layer, calibration)
        layers.append(
            {
                "name": name,
                "op_type": layer.get("op_type"),
                "onnx_nodes": mapping.get(name, []) if name in known else [],
                "inserted": not mapping.get(name) and str(layer.get("op_type")) in RUNTIME_OPS,
                "device": "CPU" if provider in ("", "CPUExecutionProvider") else "NPU",
                "executed_by": provider or "unknown",
                "precision": executed_precision(str(layer.get("op_type") or ""), layer.get("output_type")),
                "time_ms": round(max(0.0, raw_us - cost_us) / 1e3, 6),
                "raw_time_ms": round(raw_us / 1e3, 6),
                "profiler_cost_ms": round(cost_us / 1e3, 6),
                "tensors": int(layer.get("tensors") or 0),
                "dims": int(layer.get("dims") or 0),
            }
        )
    return layers
