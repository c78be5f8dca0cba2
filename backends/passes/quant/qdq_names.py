"""Short names for the Q/DQ nodes and tensors ONNX Runtime's quantizer adds.

The quantizer names what it adds after the tensor it quantizes, with long suffixes
(`conv2d_0.w_0_DequantizeLinear_Output`). On a conv net with a few hundred Q/DQ pairs those
strings are about a tenth of the int8 file (172 KB of 1.54 MB on PP-OCRv4 det), and an int8
artifact is four times smaller than the float one, so names weigh four times more. Renaming only
what the quantizer added keeps every name of the float model, so sensitive-layer rules, the stage
report and a diff against the float model still address the same nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

_QDQ = {"QuantizeLinear": "Q", "DequantizeLinear": "DQ"}
_ROLES = ("x", "s", "z")
"""Input slots of QuantizeLinear/DequantizeLinear: the data, its scale and its zero point."""


def source_names(model: onnx.ModelProto) -> set[str]:
    """Every node and tensor name of `model`: the names compaction never touches."""
    graph = model.graph
    names = {n.name for n in graph.node}
    names |= {t for n in graph.node for t in (*n.input, *n.output)}
    names |= {v.name for v in (*graph.input, *graph.output, *graph.initializer, *graph.value_info)}
    return names


def compact(model: onnx.ModelProto, keep: set[str]) -> int:
    """Renames, in place, the Q/DQ nodes and their tensors whose names are not in `keep`; returns how
    many names changed. New names are `Q12`/`DQ12` for nodes, `Q12:y` for their output, `Q12:s`,
    `Q12:z` (and `DQ12:x` for a quantized initializer) for their inputs, numbered in graph order."""
    graph = model.graph
    protected = keep | {v.name for v in (*graph.input, *graph.output)} | _subgraph_names(model)
    renames: dict[str, str] = {}
    for index, node in enumerate(n for n in graph.node if n.op_type in _QDQ):
        tag = f"{_QDQ[node.op_type]}{index}"
        if node.name not in protected:
            node.name = tag
        for role, tensor in zip(_ROLES, node.input, strict=False):
            if tensor and tensor not in protected and tensor not in renames:
                renames[tensor] = f"{tag}:{role}"
        for tensor in node.output:
            if tensor and tensor not in protected and tensor not in renames:
                renames[tensor] = f"{tag}:y"
    _apply(graph, renames)
    return len(renames)


def _apply(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    for node in graph.node:
        node.input[:] = [renames.get(t, t) for t in node.input]
        node.output[:] = [renames.get(t, t) for t in node.output]
    for proto in (*graph.initializer, *graph.value_info):
        proto.name = renames.get(proto.name, proto.name)


def _subgraph_names(model: onnx.ModelProto) -> set[str]:
    """Names used inside If/Loop/Scan bodies: they may reference outer tensors implicitly."""
    names: set[str] = set()
    for graph in _subgraphs(model.graph.node):
        names |= {t for n in graph.node for t in (*n.input, *n.output)}
    return names


def _subgraphs(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.GraphProto]:
    for node in nodes:
        for attr in node.attribute:
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for body in bodies:
                yield body
                yield from _subgraphs(body.node)
