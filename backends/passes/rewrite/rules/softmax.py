"""Softmax forms: the opset-11 "coerced 2-D" wrapper removed, a non-last axis moved last, a rank below 4
lifted to 4-D so the axis is 3 (the axes NPUs such as RKNN support).

Softmax along one axis is independent of how the other axes are arranged, so transposing or reshaping
the other axes around it is exact.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite, int64_array


def _axis(ctx: Context, i: int) -> int | None:
    rank = ctx.facts.rank(ctx.nodes[i].input[0])
    if rank is None:
        return None
    axis = int(ctx.attr(i, "axis", -1))
    return axis + rank if axis < 0 else axis


class SoftmaxUncoerce(Rewrite):
    """Flatten(x, r-1) -> Softmax(last) -> Reshape(shape of x)  ->  Softmax(x, axis=-1)."""

    name = "softmax_uncoerce"
    family = "Softmax"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Softmax"):
            node = ctx.nodes[i]
            f = ctx.producer(node.input[0])
            if f is None or ctx.nodes[f].op_type != "Flatten" or ctx.only_consumer(node.input[0]) != i:
                continue
            x = ctx.nodes[f].input[0]
            xs = ctx.facts.static_shape(x)
            if xs is None or int(ctx.attr(f, "axis", 1)) not in (len(xs) - 1, -1) or _axis(ctx, i) != 1:
                continue
            r = ctx.only_consumer(node.output[0])
            if r is None or ctx.nodes[r].op_type != "Reshape":
                continue
            if ctx.facts.static_shape(ctx.nodes[r].output[0]) != xs:
                continue
            m = Match(self.name, ctx.facts.names[i], [f, i, r])
            ctx.node(m, "Softmax", [x], [ctx.nodes[r].output[0]], axis=-1)
            out.append(m)
        return out


class SoftmaxLastAxis(Rewrite):
    """Softmax on a non-last axis -> Transpose, Softmax(-1), Transpose back."""

    name = "softmax_to_last_axis"
    family = "Softmax"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Softmax"):
            node = ctx.nodes[i]
            rank, axis = ctx.facts.rank(node.input[0]), _axis(ctx, i)
            if rank is None or axis is None or axis == rank - 1:
                continue
            perm = list(range(rank))
            perm[axis], perm[-1] = perm[-1], perm[axis]
            m = Match(self.name, ctx.facts.names[i], [i])
            t = ctx.node(m, "Transpose", [node.input[0]], perm=perm)
            s = ctx.node(m, "Softmax", [t], axis=-1)
            ctx.node(m, "Transpose", [s], [node.output[0]], perm=perm)
            out.append(m)
        return out


class SoftmaxTo4D(Rewrite):
    """Softmax over the last axis of a rank-2/3 tensor -> Reshape to 4-D, Softmax(axis=3), Reshape back."""

    name = "softmax_to_4d"
    family = "Softmax"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Softmax"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            if shape is None or len(shape) not in (2, 3) or _axis(ctx, i) != len(shape) - 1:
                continue
            lifted = [1] * (4 - len(shape)) + list(shape)
            m = Match(self.name, ctx.facts.names[i], [i])
            r = ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "shape4d", int64_array(lifted))])
            s = ctx.node(m, "Softmax", [r], axis=3)
            ctx.node(m, "Reshape", [s, ctx.const(m, "shape", int64_array(shape))], [node.output[0]])
            out.append(m)
        return out


REWRITES: list[Rewrite] = [SoftmaxUncoerce(), SoftmaxLastAxis(), SoftmaxTo4D()]
