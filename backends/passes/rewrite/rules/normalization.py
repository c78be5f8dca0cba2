"""LayerNormalization: recomposed from its exported elementwise form, or decomposed into it.

Exporters (paddle2onnx, older torch) write LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
Div, Mul, Add. A target with a LayerNormalization kernel (QNN HTP, Core ML) runs one op; a target without
it needs the elementwise form. Both directions compute the same formula.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite, float_array, int64_array


def _reduce_axes(ctx: Context, i: int) -> list[int] | None:
    axes = ctx.attr(i, "axes")
    node = ctx.nodes[i]
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = ctx.facts.value(node.input[1])
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    rank = ctx.facts.rank(node.input[0])
    if axes is None or rank is None:
        return None
    return sorted(a + rank if a < 0 else a for a in axes)


def _is_last_axis_mean(ctx: Context, i: int) -> bool:
    node = ctx.nodes[i]
    rank = ctx.facts.rank(node.input[0])
    return (
        node.op_type == "ReduceMean"
        and rank is not None
        and _reduce_axes(ctx, i) == [rank - 1]
        and int(ctx.attr(i, "keepdims", 1)) == 1
    )


def _sole(ctx: Context, tensor: str, op: str) -> int | None:
    c = ctx.only_consumer(tensor)
    return c if c is not None and ctx.nodes[c].op_type == op else None


class LayerNormRecompose(Rewrite):
    """The exported elementwise LayerNorm over the last axis -> LayerNormalization (opset 17)."""

    name = "layernorm_recompose"
    family = "LayerNormalization"
    min_opset = 17

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("ReduceMean"):
            m = self._match(ctx, i)
            if m is not None:
                out.append(m)
        return out

    def _match(self, ctx: Context, mean: int) -> Match | None:
        if not _is_last_axis_mean(ctx, mean):
            return None
        x = ctx.nodes[mean].input[0]
        sub = _sole(ctx, ctx.nodes[mean].output[0], "Sub")
        if sub is None or list(ctx.nodes[sub].input) != [x, ctx.nodes[mean].output[0]]:
            return None
        d = ctx.nodes[sub].output[0]
        users = ctx.consumers(d)
        if len(users) != 2 or d in ctx.facts.graph_outputs:
            return None
        sq = next((u for u in users if ctx.nodes[u].op_type in ("Pow", "Mul")), None)
        div = next((u for u in users if ctx.nodes[u].op_type == "Div"), None)
        if sq is None or div is None:
            return None
        sq_node = ctx.nodes[sq]
        squared = (sq_node.op_type == "Pow" and ctx.scalar(sq_node.input[1]) == 2.0) or (
            sq_node.op_type == "Mul" and list(sq_node.input) == [d, d]
        )
        if not squared:
            return None
        var = _sole(ctx, sq_node.output[0], "ReduceMean")
        if var is None or not _is_last_axis_mean(ctx, var):
            return None
        add = _sole(ctx, ctx.nodes[var].output[0], "Add")
        eps = ctx.scalar(ctx.other_input(add, ctx.nodes[var].output[0]) or "") if add is not None else None
        if add is None or eps is None:
            return None
        sqrt = _sole(ctx, ctx.nodes[add].output[0], "Sqrt")
        if sqrt is None or list(ctx.nodes[div].input) != [d, ctx.nodes[sqrt].output[0]]:
            return None
        if ctx.only_consumer(ctx.nodes[sqrt].output[0]) != div:
            return None
        nodes = [mean, sub, sq, var, add, sqrt, div]
        y = ctx.nodes[div].output[0]
        c = ctx.facts.static_shape(x)
        if c is None:
            return None
        scale = bias = None
        mul = _sole(ctx, y, "Mul")
        if mul is not None and self._vector(ctx, ctx.other_input(mul, y), c[-1]):
            scale = ctx.other_input(mul, y)
            nodes.append(mul)
            y = ctx.nodes[mul].output[0]
            badd = _sole(ctx, y, "Add")
            if badd is not None and self._vector(ctx, ctx.other_input(badd, y), c[-1]):
                bias = ctx.other_input(badd, y)
                nodes.append(badd)
                y = ctx.nodes[badd].output[0]
        m = Match(self.name, ctx.facts.names[mean], nodes)
        scale_name = self._flat(ctx, m, scale, c[-1], 1.0)
        bias_name = self._flat(ctx, m, bias, c[-1], 0.0)
        ctx.node(m, "LayerNormalization", [x, scale_name, bias_name], [y], axis=-1, epsilon=float(eps))
        return m

    @staticmethod
    def _vector(ctx: Context, tensor: str | None, n: int) -> bool:
        value = ctx.facts.value(tensor) if tensor else None
        return value is not None and value.size == n and value.shape[-1:] == (n,)

    @staticmethod
    def _flat(ctx: Context, m: Match, tensor: str | None, n: int, fill: float) -> str:
        import numpy as np

        value = ctx.facts.value(tensor) if tensor else None
        array = np.full((n,), fill, np.float32) if value is None else value.reshape(n).astype(np.float32)
        return ctx.const(m, f"{m.anchor}/{'scale' if fill else 'bias'}", array)


class LayerNormDecompose(Rewrite):
    """LayerNormalization -> ReduceMean, Sub, Mul, ReduceMean, Add, Pow(-0.5), Mul, Mul, Add."""

    name = "layernorm_decompose"
    family = "LayerNormalization"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("LayerNormalization"):
            node = ctx.nodes[i]
            rank = ctx.facts.rank(node.input[0])
            if rank is None or len([o for o in node.output if o]) != 1:
                continue
            axis = int(ctx.attr(i, "axis", -1))
            axes = list(range(axis + rank if axis < 0 else axis, rank))
            m = Match(self.name, ctx.facts.names[i], [i])
            x = node.input[0]
            mean = self._mean(ctx, m, x, axes)
            d = ctx.node(m, "Sub", [x, mean])
            var = self._mean(ctx, m, ctx.node(m, "Mul", [d, d]), axes)
            eps = ctx.const(m, "eps", float_array(float(ctx.attr(i, "epsilon", 1e-5))))
            r = ctx.node(m, "Pow", [ctx.node(m, "Add", [var, eps]), ctx.const(m, "mhalf", float_array(-0.5))])
            y = ctx.node(m, "Mul", [d, r])
            has_bias = len(node.input) > 2 and node.input[2]
            y = ctx.node(m, "Mul", [y, node.input[1]], None if has_bias else [node.output[0]])
            if has_bias:
                ctx.node(m, "Add", [y, node.input[2]], [node.output[0]])
            out.append(m)
        return out

    @staticmethod
    def _mean(ctx: Context, m: Match, x: str, axes: list[int]) -> str:
        if ctx.facts.opset >= 18:
            return ctx.node(m, "ReduceMean", [x, ctx.const(m, "axes", int64_array(axes))], keepdims=1)
        return ctx.node(m, "ReduceMean", [x], axes=axes, keepdims=1)


REWRITES: list[Rewrite] = [LayerNormRecompose(), LayerNormDecompose()]
