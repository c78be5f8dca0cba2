"""Arithmetic forms: division by a constant, square roots and reciprocal square roots.

RKNN runs Div only in fp16 and has no Sqrt, but runs Mul and Pow with exponents 0.5 and -0.5; a
normalization's x / Sqrt(v) becomes x * Pow(v, -0.5) and x / c becomes x * (1 / c). The results differ
from the originals by float rounding only (an ulp or two).
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite, float_array

_FLOAT = (1, 10, 11)


class DivByConstant(Rewrite):
    """x / c -> x * (1 / c) for a constant float c with no zero."""

    name = "div_const_to_mul"
    family = "arithmetic"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Div"):
            node = ctx.nodes[i]
            c = ctx.facts.value(node.input[1])
            if c is None or ctx.facts.is_const(node.input[0]) or ctx.dtype(node.input[1]) not in _FLOAT:
                continue
            if (c == 0).any():
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            inv = ctx.const(m, f"{node.input[1]}/reciprocal", (1.0 / c).astype(c.dtype))
            ctx.node(m, "Mul", [node.input[0], inv], [node.output[0]])
            out.append(m)
        return out


class DivBySqrt(Rewrite):
    """x / Sqrt(v) -> x * Pow(v, -0.5) when the Sqrt feeds only that Div."""

    name = "div_sqrt_to_rsqrt"
    family = "arithmetic"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Div"):
            node = ctx.nodes[i]
            s = ctx.producer(node.input[1])
            if s is None or ctx.nodes[s].op_type != "Sqrt" or ctx.only_consumer(node.input[1]) != i:
                continue
            m = Match(self.name, ctx.facts.names[i], [s, i])
            exp = ctx.const(
                m, f"{ctx.facts.names[s]}/minus_half", float_array(-0.5, _np_dtype(ctx, node.input[1]))
            )
            r = ctx.node(m, "Pow", [ctx.nodes[s].input[0], exp])
            ctx.node(m, "Mul", [node.input[0], r], [node.output[0]])
            out.append(m)
        return out


class SqrtToPow(Rewrite):
    """Sqrt(x) -> Pow(x, 0.5)."""

    name = "sqrt_to_pow"
    family = "arithmetic"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Sqrt"):
            node = ctx.nodes[i]
            m = Match(self.name, ctx.facts.names[i], [i])
            half = ctx.const(m, f"{ctx.facts.names[i]}/half", float_array(0.5, _np_dtype(ctx, node.input[0])))
            ctx.node(m, "Pow", [node.input[0], half], [node.output[0]])
            out.append(m)
        return out


def _np_dtype(ctx: Context, tensor: str) -> object:
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(ctx.dtype(tensor))


REWRITES: list[Rewrite] = [DivBySqrt(), DivByConstant(), SqrtToPow()]
