"""Graph surgery shared by the rewrite stage and its library: applying matches to a copy of a model,
a stable topological order, and dead-code removal. Deterministic: the same matches give the same bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx

    from backends.passes.rewrite.rules import Match


def apply_matches(model: onnx.ModelProto, matches: Sequence[Match]) -> onnx.ModelProto:
    """A copy of `model` with `matches` applied, topologically sorted, dead nodes removed."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    remove: set[int] = set()
    renames: dict[str, str] = {}
    added: list[onnx.NodeProto] = []
    for m in matches:
        remove.update(m.nodes)
        added.extend(m.new_nodes)
        renames.update(m.renames)
        g.initializer.extend(m.initializers)
    kept = [n for i, n in enumerate(g.node) if i not in remove]
    nodes = kept + added
    if renames:
        outputs = {o.name for o in g.output}
        for n in nodes:
            for k, name in enumerate(n.input):
                n.input[k] = _resolve(name, renames)
        for key, value in renames.items():
            if key in outputs:
                _rename_output(nodes, g, key, _resolve(value, renames))
    del g.node[:]
    g.node.extend(topo_sort(nodes, {v.name for v in g.input} | {t.name for t in g.initializer}))
    remove_dead(out)
    del g.value_info[:]
    return out


def _resolve(name: str, renames: Mapping[str, str]) -> str:
    seen = 0
    while name in renames and seen < 100:
        name = renames[name]
        seen += 1
    return name


def _rename_output(nodes: list[onnx.NodeProto], g: onnx.GraphProto, output: str, source: str) -> None:
    """Keeps a graph output's name when the node producing it was removed: add an Identity."""
    from onnx import helper

    nodes.append(helper.make_node("Identity", [source], [output], name=f"{output}/keep_output"))


def topo_sort(nodes: Sequence[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Stable topological order: among ready nodes, the one earliest in `nodes` first."""
    import heapq

    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    waiting: dict[int, int] = {}
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        deps = {producer[t] for t in n.input if t and t in producer and t not in available}
        deps.discard(i)
        waiting[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, c in waiting.items() if c == 0]
    heapq.heapify(ready)
    out: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise TerminalError("rewrite produced a cycle in the graph (a bug in a rewrite)")
    return out


def remove_dead(model: onnx.ModelProto) -> int:
    """Removes nodes whose outputs nobody reads and initializers nobody uses; returns nodes removed."""
    g = model.graph
    needed = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output if o):
            keep.append(n)
            needed.update(t for t in n.input if t)
    removed = len(g.node) - len(keep)
    if removed:
        del g.node[:]
        g.node.extend(reversed(keep))
    used = needed
    inits = [t for t in g.initializer if t.name in used]
    if len(inits) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(inits)
    return removed


def name_nodes(model: onnx.ModelProto) -> None:
    """Gives every node its stable identifier as a name, so names survive rewrites that move indexes."""
    from backends.passes.facts import name_nodes as give_names

    give_names(model)
