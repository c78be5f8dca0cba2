"""Constant folding and clean-ups: Constant/shape subgraphs to initializers, no-op removal, Reshape chains.

Folding turns every compile-time computation (Constant nodes, Shape -> Cast -> Concat chains of static
shapes) into initializers, so placement and later rewrites see plain constants. Tensors too large to
materialize (facts.MATERIALIZE_LIMIT) are left to the compiler.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import CLEANUP, Context, Match, Rewrite, int64_array


class ConstantFolding(Rewrite):
    name = "constant_folding"
    family = "constant folding"
    exact = True
    kind = CLEANUP
    switch = "constant_folding"

    def find(self, ctx: Context) -> list[Match]:
        from onnx import numpy_helper

        out = []
        for i in sorted(ctx.facts.const_nodes):
            node = ctx.nodes[i]
            outs = [o for o in node.output if o]
            if not outs or not all(o in ctx.facts.values for o in outs):
                continue
            if not any(ctx.consumers(o) or o in ctx.facts.graph_outputs for o in outs):
                continue
            inits = [numpy_helper.from_array(ctx.facts.values[o], o) for o in outs]
            out.append(Match(self.name, ctx.facts.names[i], [i], initializers=inits))
        return out


class RemoveIdentity(Rewrite):
    """Identity, and Dropout in inference, pass their input through: consumers read the input directly."""

    name = "remove_identity"
    family = "dead-node removal"
    exact = True
    kind = CLEANUP

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(("Identity", "Dropout")):
            node = ctx.nodes[i]
            if node.op_type == "Dropout" and (
                len(node.output) > 1 and node.output[1] and ctx.consumers(node.output[1])
            ):
                continue
            src, dst = node.input[0], node.output[0]
            if dst in ctx.facts.graph_outputs or (
                src in ctx.facts.graph_inputs and dst in ctx.facts.graph_outputs
            ):
                continue
            out.append(Match(self.name, ctx.facts.names[i], [i], renames={dst: src}))
        return out


_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


class CollapseReshape(Rewrite):
    """Reshape(Reshape(x)) -> Reshape(x); a Reshape to the shape it already has disappears."""

    name = "collapse_reshape"
    family = "dead-node removal"
    exact = True
    kind = CLEANUP

    def find(self, ctx: Context) -> list[Match]:
        out: list[Match] = []
        used: set[int] = set()
        for i in ctx.runtime("Reshape"):
            node = ctx.nodes[i]
            target = ctx.facts.static_shape(node.output[0])
            src = ctx.facts.static_shape(node.input[0])
            if target is None or src is None or i in used:
                continue
            if src == target and node.output[0] not in ctx.facts.graph_outputs:
                used.add(i)
                out.append(Match(self.name, ctx.facts.names[i], [i], renames={node.output[0]: node.input[0]}))
                continue
            p = ctx.producer(node.input[0])
            if (
                p is None
                or p in used
                or ctx.nodes[p].op_type not in _RESHAPES
                or ctx.only_consumer(node.input[0]) != i
            ):
                continue
            m = Match(self.name, ctx.facts.names[i], [p, i])
            shape = ctx.const(m, f"{node.name}/shape", int64_array(target))
            ctx.node(m, "Reshape", [ctx.nodes[p].input[0], shape], [node.output[0]])
            used.update((p, i))
            out.append(m)
        return out


REWRITES: list[Rewrite] = [ConstantFolding(), RemoveIdentity()]
CLEANUPS: list[Rewrite] = [CollapseReshape(), RemoveIdentity()]
