"""The rewrite library: semantics-preserving graph rewrites, one module per family.

A rewrite only *finds* matches; it never edits the model. A `Match` names the nodes it replaces and the
nodes and initializers that replace them, with the same external tensor names, so the engine
(backends.passes.rewrite.stage) can apply any subset of matches, re-place the result on the target, keep only
the matches that raise placement, and verify the outputs numerically.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes.facts import Facts

REPLACE, FUSION, CLEANUP = "replace", "fusion", "cleanup"


@dataclass
class Match:
    """One application of a rewrite: remove `nodes` (indexes), add `new_nodes` and `initializers`."""

    rewrite: str
    anchor: str
    """Name of the main matched node, for the report."""
    nodes: list[int]
    new_nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    removed_outputs: list[str] = field(default_factory=list)
    """Output tensors of removed nodes that nothing produces any more (their consumers were rewired)."""
    renames: dict[str, str] = field(default_factory=dict)
    """tensor -> tensor: consumers of the key read the value instead (used by removals such as Identity)."""


@dataclass
class Context:
    """What a rewrite may look at: the model, its facts and the current placement."""

    model: onnx.ModelProto
    facts: Facts
    devices: Mapping[int, str]
    """node index -> NPU | CPU for runtime nodes."""
    table: Any
    """The target's OpTable (lookup(op, domain))."""
    constraints_ctx: Any
    """backends.passes.constraints.Context of the target's precision."""
    fusion: Mapping[str, bool] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        g = self.model.graph
        self._names = {t for n in g.node for t in (*n.input, *n.output)} | {t.name for t in g.initializer}
        self._names |= {v.name for v in g.input} | {n.name for n in g.node}

    def fresh(self, hint: str) -> str:
        """A tensor or node name unused in the model, derived deterministically from `hint`."""
        name, k = hint, 0
        while name in self._names:
            k += 1
            name = f"{hint}_{k}"
        self._names.add(name)
        return name

    def const(self, match: Match, hint: str, value: np.ndarray) -> str:
        """Adds an initializer to `match` and returns its name."""
        from onnx import numpy_helper

        name = self.fresh(hint)
        match.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(
        self, match: Match, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any
    ) -> str:
        """Adds a node to `match`; returns its (first) output name (a fresh one unless given)."""
        from onnx import helper

        hint = f"{match.anchor}/{match.rewrite}/{op}"
        outs = outputs if outputs is not None else [self.fresh(hint + ":0")]
        match.new_nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(hint), **attrs))
        return outs[0]

    # ---------------------------------------------------------------- graph queries

    @property
    def nodes(self) -> Any:
        return self.model.graph.node

    def consumers(self, tensor: str) -> list[int]:
        return [i for i in self.facts.consumers.get(tensor, []) if i not in self.facts.const_nodes]

    def producer(self, tensor: str) -> int | None:
        return self.facts.producer.get(tensor)

    def only_consumer(self, tensor: str) -> int | None:
        """The single runtime consumer of `tensor`, unless it is also a graph output."""
        cons = self.consumers(tensor)
        if len(cons) != 1 or tensor in self.facts.graph_outputs:
            return None
        return cons[0]

    def runtime(self, op_type: str | Iterable[str]) -> Iterator[int]:
        ops = {op_type} if isinstance(op_type, str) else set(op_type)
        for i in self.facts.runtime_nodes():
            node = self.nodes[i]
            if node.op_type in ops and node.domain in ("", "ai.onnx"):
                yield i

    def scalar(self, tensor: str) -> float | None:
        """The value of a constant tensor with a single element, else None."""
        value = self.facts.value(tensor) if tensor else None
        if value is None or value.size != 1:
            return None
        return float(value.reshape(-1)[0])

    def attr(self, index: int, name: str, default: Any = None) -> Any:
        from onnx import helper

        for a in self.nodes[index].attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def other_input(self, index: int, tensor: str) -> str | None:
        """For a binary node reading `tensor`, its other input."""
        ins = list(self.nodes[index].input)
        if len(ins) != 2 or tensor not in ins:
            return None
        return ins[1] if ins[0] == tensor else ins[0]

    def on_npu(self, index: int) -> bool:
        return self.devices.get(index) == "NPU"

    def supported(self, op_type: str) -> bool:
        """Whether the op table lists `op_type` as runnable at all (yes or partial)."""
        row = self.table.lookup(op_type, "")
        return row is not None and row.supported in ("yes", "partial")

    def dtype(self, tensor: str) -> int:
        return self.facts.dtypes.get(tensor, 1)


class Rewrite:
    """A rewrite family member. Subclasses set the class attributes and implement `find`."""

    name: str = ""
    family: str = ""
    kind: str = REPLACE
    switch: str | None = None
    """For fusions: the spec's rewrite.fusion switch that enables it."""
    exact: bool = False
    """Moves or reshapes data only (no arithmetic changes): verified on the graph outputs alone."""
    min_opset: int = 0
    """The opset the replacement needs (HardSwish 14, LayerNormalization 17, Gelu 20); the engine upgrades
    the model with onnx's version converter first, and verifies the result like any rewrite."""

    def find(self, ctx: Context) -> list[Match]:
        raise NotImplementedError

    def enabled(self, fusion: Mapping[str, bool]) -> bool:
        return self.switch is None or bool(fusion.get(self.switch, True))


def float_array(values: Any, dtype: Any = None) -> np.ndarray:
    import numpy as np

    return np.asarray(values, dtype=dtype or np.float32)


def int64_array(values: Iterable[int]) -> np.ndarray:
    import numpy as np

    return np.asarray(list(values), dtype=np.int64)


def names() -> list[str]:
    """The names of every rewrite in the library, in the engine's order, then the converter forms
    (rules.convertible, applied before each converter): what `rewrite.disable` takes."""
    from backends.passes.rewrite.rules.convertible import REWRITES as FORMS

    return list(dict.fromkeys([*(rw.name for rw in registry()), *(rw.name for rw in FORMS)]))


def registry() -> list[Rewrite]:
    """Every rewrite in the order the engine tries them."""
    from backends.passes.rewrite.rules import (
        activations,
        arith,
        clip,
        fold,
        fusion,
        layout,
        matmul,
        normalization,
        pooling,
        resize_pad,
        softmax,
    )

    modules = (
        fold,
        fusion,
        clip,
        activations,
        arith,
        softmax,
        matmul,
        pooling,
        resize_pad,
        layout,
        normalization,
    )
    out: list[Rewrite] = []
    for module in modules:
        out.extend(module.REWRITES)
    out.extend(fold.CLEANUPS)
    return out
