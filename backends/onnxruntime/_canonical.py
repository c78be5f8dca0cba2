"""A canonical form for ONNX graphs ONNX Runtime optimized, so the same input gives the same bytes.

ORT names the tensors and nodes it creates with a counter (`reorder_token_12`, `ReorderOutput_token_236`)
and, at level "all", creates them while iterating hash maps keyed by pointers: the NCHWc transformer
numbers and orders its Reorder nodes differently in every process. The graph is the same; only the
names and the node order differ. Here every name the source model did not have (the first of a kind
is plain `ReorderOutput`, later ones `ReorderOutput_token_12`) is replaced by a name derived from
content (constants: their bytes; nodes: op, attributes and canonical inputs), and nodes are put in a
topological order that breaks ties by the same content key. Names the source model had are kept.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx

_TOKEN = re.compile(r"_token_\d+")


class _Names:
    """Which names are ORT's own: not in the source model (or, without a source, `..._token_<n>`)."""

    def __init__(self, stable: set[str] | None) -> None:
        self.stable = stable

    def generated(self, name: str) -> bool:
        if not name:
            return False
        if self.stable is None:
            return bool(_TOKEN.search(name))
        return name not in self.stable


def source_names(model: onnx.ModelProto) -> set[str]:
    """Every node and tensor name of a model (its graph only, not subgraphs)."""
    graph = model.graph
    names = {node.name for node in graph.node}
    names.update(out for node in graph.node for out in node.output)
    names.update(value.name for value in [*graph.input, *graph.output, *graph.value_info, *graph.initializer])
    names.discard("")
    return names


def canonicalize(model: onnx.ModelProto, source: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """`model` (ORT's optimized form of `source`) with ORT-made names derived from content and nodes
    in canonical order, edited in place and returned: a copy would hold the weights twice (a 300 MB
    model's compile peaked at 3 GB)."""
    names = _Names(source_names(source) if source is not None else None)
    out = model
    graph = out.graph
    renames = _rename_constants(graph, names)
    order, tensor_renames, node_renames = _canonical_order(graph, renames, names)
    renames.update(tensor_renames)
    nodes = [graph.node[i] for i in order]
    for node in nodes:
        _rename_node(node, renames, node_renames)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in [*graph.value_info, *graph.output, *graph.input]:
        value.name = renames.get(value.name, value.name)
    _sort_by_name(graph.value_info)
    _sort_by_name(graph.initializer)
    return out


def _sort_by_name(field: Any) -> None:
    field.sort(key=lambda item: item.name)  # in place: no copy of the initializers


def _rename_constants(graph: onnx.GraphProto, names: _Names) -> dict[str, str]:
    """Generated initializer names become `ort_const_<sha256 of type, dims and bytes>`; initializers
    that end up with the same name hold the same bytes and are merged."""
    from onnx import numpy_helper

    renames: dict[str, str] = {}
    kept, seen = [], set()
    for init in graph.initializer:
        if names.generated(init.name):
            digest = hashlib.sha256()
            digest.update(f"{init.data_type}:{list(init.dims)}:".encode())
            digest.update(numpy_helper.to_array(init).tobytes())
            new = f"ort_const_{digest.hexdigest()[:20]}"
            renames[init.name] = new
            init.name = new
        if init.name in seen:
            continue
        seen.add(init.name)
        kept.append(init)
    if len(kept) != len(graph.initializer):
        copies = []
        for init in kept:
            copy = type(init)()
            copy.CopyFrom(init)
            copies.append(copy)
        del graph.initializer[:]
        graph.initializer.extend(copies)
    return renames


def _node_key(node: Any, inputs: Iterable[str], names: _Names) -> str:
    digest = hashlib.sha256()
    digest.update(f"{node.domain}\x00{node.op_type}\x00".encode())
    for name in inputs:
        digest.update(name.encode() + b"\x01")
    for name in node.output:
        digest.update((b"" if names.generated(name) else name.encode()) + b"\x02")
    for attr in sorted(node.attribute, key=lambda a: a.name):
        digest.update(attr.SerializeToString(deterministic=True) + b"\x03")
    return digest.hexdigest()


def _canonical_order(
    graph: onnx.GraphProto, renames: dict[str, str], known: _Names
) -> tuple[list[int], dict[str, str], dict[str, str]]:
    """Kahn's algorithm with ties broken by content key; returns node indices, new tensor names and
    new node names."""
    producers = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    consumers: dict[int, list[int]] = defaultdict(list)
    pending = []
    for i, node in enumerate(graph.node):
        deps = {producers[name] for name in _all_inputs(node) if name in producers and producers[name] != i}
        pending.append(len(deps))
        for dep in deps:
            consumers[dep].append(i)
    names: dict[str, str] = dict(renames)
    node_names: dict[str, str] = {}
    used: set[str] = set()
    heap: list[tuple[str, int]] = []

    def push(i: int) -> None:
        node = graph.node[i]
        heapq.heappush(heap, (_node_key(node, [names.get(n, n) for n in node.input], known), i))

    for i, count in enumerate(pending):
        if count == 0:
            push(i)
    order: list[int] = []
    while heap:
        key, i = heapq.heappop(heap)
        order.append(i)
        node = graph.node[i]
        for position, out in enumerate(node.output):
            if known.generated(out):
                names[out] = _unique(f"{node.op_type}_{key[:16]}_{position}", used)
        if known.generated(node.name):
            node_names[node.name] = _unique(f"{node.op_type}_{key[:16]}", used)
        for consumer in consumers[i]:
            pending[consumer] -= 1
            if pending[consumer] == 0:
                push(consumer)
    if len(order) != len(graph.node):
        raise TerminalError("the optimized graph has a cycle; cannot order it canonically")
    return order, {k: v for k, v in names.items() if k not in renames}, node_names


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate


def _all_inputs(node: Any) -> list[str]:
    """Inputs of a node including outer-scope names its subgraphs read."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in sub.node:
                names.extend(_all_inputs(inner))
    return names


def _rename_node(node: Any, renames: Mapping[str, str], node_names: Mapping[str, str]) -> None:
    for field in (node.input, node.output):
        for k, name in enumerate(field):
            if name in renames:
                field[k] = renames[name]
    if node.name in node_names:
        node.name = node_names[node.name]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in sub.node:
                _rename_node(inner, renames, {})
