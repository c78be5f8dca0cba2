"""Names onnx2tf and TensorFlow accept, and the way back to the ONNX model's own.

onnx2tf turns ONNX node and tensor names into TF scope names, which allow `[A-Za-z0-9_./-]` only:
Paddle2ONNX writes `Softmax@0` ("'Softmax@0' is not a valid scope name"). A SavedModel signature keys
inputs and outputs by names TF rewrites (`torch.onnx.export`'s default `input.1` becomes `input_1`, so a
feed keyed by the ONNX name misses). Before conversion every node and tensor name outside the scope
alphabet is rewritten into it, and every graph input and output gets an identifier (`[A-Za-z_][A-Za-z0-9_]*`)
name that TF keeps as it is; `Renamed` maps them back, so the TFLite's inputs and outputs are tied to the
ONNX model's by name, through the signature, never by shape or position.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

_SCOPE_BAD = re.compile(r"[^A-Za-z0-9_./-]")
_IDENT_BAD = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class Renamed:
    """New name -> the ONNX model's own, for graph inputs, graph outputs and nodes that were renamed."""

    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)

    def original(self, name: str) -> str:
        return self.inputs.get(name) or self.outputs.get(name) or self.nodes.get(name) or name

    def new_node(self, original: str) -> str:
        return next((new for new, old in self.nodes.items() if old == original), original)


def scope_name(name: str) -> str:
    """`name` in TF's scope alphabet, starting with a letter, digit or dot (as TF requires)."""
    out = _SCOPE_BAD.sub("_", name)
    return out if out[:1].isalnum() or out[:1] == "." else f"n{out}"


def identifier(name: str) -> str:
    """`name` as an identifier: the form a SavedModel signature keeps unchanged."""
    out = _IDENT_BAD.sub("_", name)
    return out if out[:1].isalpha() or out[:1] == "_" else f"t_{out}"


def _unique(wanted: str, taken: set[str]) -> str:
    name, k = wanted, 0
    while name in taken:
        k += 1
        name = f"{wanted}_{k}"
    taken.add(name)
    return name


def sanitize(model: onnx.ModelProto) -> Renamed:
    """Renames, in place, what onnx2tf or TF would reject or rewrite; returns the way back."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    io = [v.name for v in g.input if v.name not in inits] + [v.name for v in g.output]
    tensors = {t for n in g.node for t in (*n.input, *n.output) if t} | inits | set(io)
    taken = set(tensors)
    mapping: dict[str, str] = {}
    for name in sorted(tensors):
        wanted = identifier(name) if name in io else scope_name(name)
        if wanted != name:
            taken.discard(name)
            mapping[name] = _unique(wanted, taken)
    _rename_tensors(model, mapping)
    node_names: dict[str, str] = {}
    taken_nodes = {n.name for n in g.node}
    for k, node in enumerate(g.node):
        old = node.name or f"{node.op_type}_{k}"
        wanted = scope_name(old)
        if wanted != node.name:
            node.name = _unique(wanted, taken_nodes)
            node_names[node.name] = old
    back = {new: old for old, new in mapping.items()}
    return Renamed(
        inputs={n: back[n] for n in _names(g.input, {t.name for t in g.initializer}) if n in back},
        outputs={v.name: back[v.name] for v in g.output if v.name in back},
        nodes=node_names,
    )


def _names(values: Iterable[onnx.ValueInfoProto], skip: set[str]) -> list[str]:
    return [v.name for v in values if v.name not in skip]


def _rename_tensors(model: onnx.ModelProto, mapping: Mapping[str, str]) -> None:
    if not mapping:
        return
    g = model.graph
    for node in g.node:
        for k, t in enumerate(node.input):
            node.input[k] = mapping.get(t, t)
        for k, t in enumerate(node.output):
            node.output[k] = mapping.get(t, t)
    for values in (g.input, g.output, g.value_info):
        for v in values:
            v.name = mapping.get(v.name, v.name)
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)
