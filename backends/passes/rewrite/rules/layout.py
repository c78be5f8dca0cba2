"""Rank and layout forms: elementwise ops and Transposes lifted to 4-D, Squeeze/Unsqueeze/Flatten as Reshape.

Many NPUs (RKNN: Add, Concat, Transpose "4-D") only take 4-D tensors, while transformer blocks work on
[1, T, C]. Prepending unit axes to every operand keeps numpy broadcasting identical; a Transpose that
only moves unit axes is the same permutation on fewer axes. All of these are exact.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite, int64_array

_BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")


class ElementwiseTo4D(Rewrite):
    """A binary elementwise op on rank < 4 -> operands reshaped to 4-D, result reshaped back."""

    name = "elementwise_to_4d"
    family = "rank"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(_BINARY):
            node = ctx.nodes[i]
            y = ctx.facts.static_shape(node.output[0])
            shapes = [ctx.facts.static_shape(t) for t in node.input]
            if y is None or len(y) >= 4 or len(node.input) != 2 or any(s is None for s in shapes):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            ins = []
            for t, s in zip(node.input, shapes, strict=False):
                assert s is not None
                lifted = [1] * (4 - len(s)) + list(s)
                value = ctx.facts.value(t)
                if value is not None:
                    ins.append(ctx.const(m, f"{t}/4d", value.reshape(lifted)))
                else:
                    ins.append(ctx.node(m, "Reshape", [t, ctx.const(m, "shape4d", int64_array(lifted))]))
            z = ctx.node(m, node.op_type, ins)
            ctx.node(m, "Reshape", [z, ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


class TransposeTo4D(Rewrite):
    """A Transpose of rank != 4 whose non-unit axes fit in 4 -> Reshape, 4-D Transpose, Reshape."""

    name = "transpose_to_4d"
    family = "rank"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Transpose"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            y = ctx.facts.static_shape(node.output[0])
            if shape is None or y is None or len(shape) == 4:
                continue
            perm = list(ctx.attr(i, "perm") or reversed(range(len(shape))))
            keep = [a for a in range(len(shape)) if shape[a] != 1]
            if len(keep) > 4:
                continue
            order = [a for a in perm if a in keep]
            pad = 4 - len(keep)
            new_shape = [1] * pad + [shape[a] for a in keep]
            new_perm = list(range(pad)) + [pad + keep.index(a) for a in order]
            m = Match(self.name, ctx.facts.names[i], [i])
            r = ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "shape4d", int64_array(new_shape))])
            t = ctx.node(m, "Transpose", [r], perm=new_perm)
            ctx.node(m, "Reshape", [t, ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


class ShapeOpsToReshape(Rewrite):
    """Squeeze, Unsqueeze and Flatten with static shapes -> Reshape."""

    name = "shape_ops_to_reshape"
    family = "rank"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(("Squeeze", "Unsqueeze", "Flatten")):
            node = ctx.nodes[i]
            y = ctx.facts.static_shape(node.output[0])
            if y is None:
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


REWRITES: list[Rewrite] = [ShapeOpsToReshape(), TransposeTo4D(), ElementwiseTo4D()]
