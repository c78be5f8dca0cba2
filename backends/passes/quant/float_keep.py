"""A QDQ model with chosen nodes computing in float: the activation Q/DQ pairs in front of them bypassed,
their weights restored from the float model (or dequantized when the quantizer renamed them), and the
Q/DQ nodes left dead pruned. The sensitivity ranking, the greedy search and the region search all
measure such models; the final artifact keeps its float layers by the quantizer's own exclusion instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx


def without_layer(
    qdq: onnx.ModelProto, nodes: set[str], float_weights: Mapping[str, onnx.TensorProto]
) -> bytes:
    """`qdq` with the given nodes reading float inputs: activation Q/DQ pairs bypassed, weights restored
    from the float model (or dequantized when the quantizer renamed them). Dead Q/DQ nodes are removed."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    added: dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        if node.name not in nodes:
            continue
        for k, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            source = dq.input[0]
            q = producer.get(source)
            if q is not None and q.op_type == "QuantizeLinear":
                node.input[k] = q.input[0]
                continue
            if source not in inits:
                continue
            original = source[: -len("_quantized")] if source.endswith("_quantized") else None
            if original is not None and original in float_weights:
                fresh = original + "__float"
                node.input[k] = fresh
                if fresh not in added:
                    weight = onnx.TensorProto()
                    weight.CopyFrom(float_weights[original])
                    weight.name = fresh
                    added[fresh] = weight
                continue
            node.input[k] = _dequantized(dq, inits, added, numpy_helper)
    graph.initializer.extend(t for name, t in sorted(added.items()) if name not in inits)
    _bypass_output_qdq(graph, nodes, producer)
    prune(model)
    return bytes(model.SerializeToString())


def _bypass_output_qdq(graph: Any, nodes: set[str], producer: Mapping[str, Any]) -> None:
    """Graph outputs written by Q -> DQ after one of `nodes` become Identity of the float tensor."""
    outputs = {o.name for o in graph.output}
    for dq in graph.node:
        if dq.op_type != "DequantizeLinear" or dq.output[0] not in outputs:
            continue
        q = producer.get(dq.input[0])
        source = producer.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
        if q is None or source is None or source.name not in nodes:
            continue
        dq.op_type = "Identity"
        dq.domain = ""
        del dq.attribute[:]
        del dq.input[:]
        dq.input.append(q.input[0])


def _dequantized(
    dq: onnx.NodeProto, inits: Mapping[str, Any], added: dict[str, Any], numpy_helper: Any
) -> str:
    import numpy as np

    name = dq.output[0] + "_float"
    if name in added:
        return name
    x = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
    zp = (
        numpy_helper.to_array(inits[dq.input[2]]).astype(np.float64)
        if len(dq.input) > 2 and dq.input[2]
        else 0.0
    )
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    if np.ndim(scale) == 1 and scale.size > 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
        zp = np.reshape(zp, shape) if np.ndim(zp) else zp
    added[name] = numpy_helper.from_array(((x - zp) * scale).astype(np.float32), name)
    return name


def prune(model: onnx.ModelProto) -> None:
    """Removes nodes whose outputs nobody reads, and initializers nobody uses: a walk back from the
    graph outputs (ONNX Runtime's quantizer appends Q/DQ nodes at the end, so node order is not
    topological)."""
    graph = model.graph
    nodes = list(graph.node)
    writers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            writers.setdefault(name, []).append(i)
    wanted = {o.name for o in graph.output}
    frontier = list(wanted)
    live = [False] * len(nodes)
    while frontier:
        for i in writers.get(frontier.pop(), []):
            if live[i]:
                continue
            live[i] = True
            for t in nodes[i].input:
                if t and t not in wanted:
                    wanted.add(t)
                    frontier.append(t)
    if not all(live):
        del graph.node[:]
        graph.node.extend(n for n, keep in zip(nodes, live, strict=True) if keep)
    used = [t for t in graph.initializer if t.name in wanted]
    if len(used) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(used)
