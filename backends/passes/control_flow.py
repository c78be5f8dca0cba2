"""The bodies of If / Loop / Scan nodes, analysed as graphs of their own.

A control-flow node hides its work in graph attributes: a voice-activity model whose LSTMs sit in the
branches of an `If` looks like three nodes and no MACs from the main graph alone. Each body is wrapped
as a model of its own (the outer-scope tensors it reads become inputs, or initializers when their
values are known; the loop-carried and scanned inputs get the shapes the parent node feeds them) and
analysed like the main graph, so placement and the estimate see every node inside.

How often a body runs: an If runs one branch (the costlier one is billed: the estimate must not drop
work that may run); a Loop runs its body `M` times when the trip count is a constant (once, and said
so, when it is not); a Scan runs it once per slice along the scan axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from backends.passes.facts import Facts

GRAPH, GRAPHS = 5, 10
"""onnx.AttributeProto types that hold subgraphs."""

MAX_DEPTH = 8
"""Bodies nested deeper than this are not analysed (a bounded walk over untrusted models)."""


@dataclass(frozen=True)
class Body:
    attr: str
    """The attribute holding the graph: then_branch, else_branch, body."""
    facts: Facts


def has_bodies(node: onnx.NodeProto) -> bool:
    return any(a.type in (GRAPH, GRAPHS) for a in node.attribute)


def bodies(node: onnx.NodeProto, outer: Facts) -> list[Body]:
    """Facts for every graph attribute of `node` (empty for a node without one, or too deep)."""
    from backends.passes.facts import analyse

    if outer.depth >= MAX_DEPTH or not has_bodies(node):
        return []
    cached = outer.body_cache.get(id(node))
    if cached is not None:
        return list(cached)
    out = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == GRAPH else list(attr.graphs) if attr.type == GRAPHS else []
        for index, graph in enumerate(graphs):
            name = attr.name if len(graphs) == 1 else f"{attr.name}.{index}"
            out.append(Body(name, analyse(_body_model(graph, node, outer), depth=outer.depth + 1)))
    outer.body_cache[id(node)] = out
    return list(out)


def repeats(node: onnx.NodeProto, outer: Facts) -> tuple[int, str]:
    """(how many times the body of a Loop or Scan runs, how that was decided)."""
    if node.op_type == "Loop":
        trip = node.input[0] if node.input else ""
        value = outer.value(trip) if trip else None
        if value is not None and value.size == 1:
            return max(0, int(value.reshape(-1)[0])), f"{int(value.reshape(-1)[0])} iterations (constant M)"
        return 1, "trip count not constant: body counted once"
    if node.op_type == "Scan":
        scans = _scan_inputs(node)
        axes = _ints(node, "scan_input_axes") or [0] * len(scans)
        for name, axis in zip(scans, axes, strict=False):
            shape = outer.static_shape(name)
            if shape:
                return int(shape[axis % len(shape)]), f"{shape[axis % len(shape)]} scan steps"
        return 1, "scan length unknown: body counted once"
    return 1, ""


def _ints(node: onnx.NodeProto, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def _scan_inputs(node: onnx.NodeProto) -> list[str]:
    count = next((int(a.i) for a in node.attribute if a.name == "num_scan_inputs"), 0)
    return list(node.input[len(node.input) - count :]) if count else []


def _fed_shapes(node: onnx.NodeProto, graph: onnx.GraphProto, outer: Facts) -> dict[str, tuple[str, int]]:
    """body input name -> (outer tensor whose shape it takes, axis to drop or -1)."""
    names = [i.name for i in graph.input]
    if node.op_type == "Loop":
        return {body: (parent, -1) for body, parent in zip(names[2:], node.input[2:], strict=False)}
    if node.op_type == "Scan":
        scans = _scan_inputs(node)
        states = list(node.input[: len(node.input) - len(scans)])
        axes = _ints(node, "scan_input_axes") or [0] * len(scans)
        fed = {body: (parent, -1) for body, parent in zip(names, states, strict=False)}
        for body, parent, axis in zip(names[len(states) :], scans, axes, strict=False):
            fed[body] = (parent, axis)
        return fed
    return {}


def _body_model(graph: onnx.GraphProto, node: onnx.NodeProto, outer: Facts) -> onnx.ModelProto:
    import onnx
    from onnx import helper, numpy_helper

    body = onnx.GraphProto()
    body.CopyFrom(graph)
    for vi in body.input:
        parent, axis = _fed_shapes(node, graph, outer).get(vi.name, ("", -1))
        shape = outer.static_shape(parent) if parent else None
        if shape is not None and vi.type.HasField("tensor_type"):
            fed = [d for i, d in enumerate(shape) if axis < 0 or i != axis % len(shape)]
            vi.type.tensor_type.ClearField("shape")
            vi.type.tensor_type.shape.SetInParent()
            for d in fed:
                vi.type.tensor_type.shape.dim.add().dim_value = d
    declared = {i.name for i in body.input} | {t.name for t in body.initializer}
    declared |= {o for n in body.node for o in n.output}
    referenced = sorted({t for n in body.node for t in n.input if t and t not in declared})
    for name in referenced:
        value = outer.value(name)
        if value is not None:
            body.initializer.append(numpy_helper.from_array(value, name))
            continue
        known = outer.shape(name)
        elem = outer.dtypes.get(name, onnx.TensorProto.FLOAT)
        body.input.append(
            helper.make_tensor_value_info(name, elem, list(known) if known is not None else None)
        )
    model = onnx.ModelProto()
    model.ir_version = outer.model.ir_version
    model.opset_import.extend(outer.model.opset_import)
    model.graph.CopyFrom(body)
    return model
