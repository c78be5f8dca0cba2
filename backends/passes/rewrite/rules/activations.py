"""Activation forms: HardSwish and GELU, recomposed into one op or decomposed into elementwise ops.

Exporters spell HardSwish as x * Clip(x + 3, 0, 6) / 6 (or x * HardSigmoid(x)) and GELU as
0.5 * x * (1 + Erf(x / sqrt 2)); an NPU that runs the single op (RKNN HardSwish, QNN Gelu) wants it
recomposed, one that lacks it wants the elementwise form. Both directions are exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backends.passes.rewrite.rules import Context, Match, Rewrite, float_array


def _close(value: float | None, want: float, tol: float = 1e-4) -> bool:
    return value is not None and abs(value - want) <= tol * max(1.0, abs(want))


def _clip_bounds(ctx: Context, i: int) -> tuple[float, float] | None:
    node = ctx.nodes[i]
    lo = ctx.scalar(node.input[1]) if len(node.input) > 1 and node.input[1] else float("-inf")
    hi = ctx.scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else float("inf")
    if lo is None or hi is None:
        return None
    return lo, hi


def _scaled_by(ctx: Context, i: int, factor: float) -> bool:
    """Node i multiplies by `factor` (Mul by c or Div by 1/c) with a constant scalar."""
    node = ctx.nodes[i]
    if node.op_type == "Mul":
        return any(_close(ctx.scalar(t), factor) for t in node.input)
    if node.op_type == "Div":
        return _close(ctx.scalar(node.input[1]), 1.0 / factor)
    return False


class HardSwishRecompose(Rewrite):
    """x * Clip(x + 3, 0, 6) / 6 and x * HardSigmoid(x; 1/6, 1/2) -> HardSwish(x)."""

    name = "hardswish_recompose"
    family = "HardSwish"
    min_opset = 14

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Add"):
            m = self._from_add(ctx, i)
            if m is not None:
                out.append(m)
        for i in ctx.runtime("HardSigmoid"):
            m = self._from_hardsigmoid(ctx, i)
            if m is not None:
                out.append(m)
        return out

    def _from_add(self, ctx: Context, add: int) -> Match | None:
        node = ctx.nodes[add]
        x = next((t for t in node.input if not ctx.facts.is_const(t)), None)
        if x is None or not _close(ctx.scalar(ctx.other_input(add, x) or ""), 3.0):
            return None
        clip = ctx.only_consumer(node.output[0])
        if clip is None or ctx.nodes[clip].op_type != "Clip" or _clip_bounds(ctx, clip) != (0.0, 6.0):
            return None
        mul = ctx.only_consumer(ctx.nodes[clip].output[0])
        if (
            mul is None
            or ctx.nodes[mul].op_type != "Mul"
            or ctx.other_input(mul, ctx.nodes[clip].output[0]) != x
        ):
            return None
        div = ctx.only_consumer(ctx.nodes[mul].output[0])
        if div is None or not _scaled_by(ctx, div, 1.0 / 6.0):
            return None
        return self._emit(ctx, [add, clip, mul, div], x, ctx.nodes[div].output[0])

    def _from_hardsigmoid(self, ctx: Context, hs: int) -> Match | None:
        node = ctx.nodes[hs]
        if not (_close(ctx.attr(hs, "alpha", 0.2), 1 / 6) and _close(ctx.attr(hs, "beta", 0.5), 0.5)):
            return None
        mul = ctx.only_consumer(node.output[0])
        x = node.input[0]
        if mul is None or ctx.nodes[mul].op_type != "Mul" or ctx.other_input(mul, node.output[0]) != x:
            return None
        return self._emit(ctx, [hs, mul], x, ctx.nodes[mul].output[0])

    def _emit(self, ctx: Context, nodes: list[int], x: str, y: str) -> Match:
        m = Match(self.name, ctx.facts.names[nodes[0]], nodes)
        ctx.node(m, "HardSwish", [x], [y])
        return m


class HardSwishDecompose(Rewrite):
    """HardSwish(x) -> x * HardSigmoid(x; 1/6, 1/2), for targets without HardSwish."""

    name = "hardswish_decompose"
    family = "HardSwish"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("HardSwish"):
            node = ctx.nodes[i]
            m = Match(self.name, ctx.facts.names[i], [i])
            hs = ctx.node(m, "HardSigmoid", [node.input[0]], alpha=1.0 / 6.0, beta=0.5)
            ctx.node(m, "Mul", [node.input[0], hs], [node.output[0]])
            out.append(m)
        return out


@dataclass(frozen=True)
class ErfGelu:
    """An exported exact GELU, 0.5 * x * (1 + Erf(x / sqrt 2)): its nodes, input and output."""

    nodes: list[int]
    """The scale into Erf, Erf, the Add of 1, the Mul by (x or 0.5 x), then the Mul by 0.5."""
    x: str
    y: str


def erf_gelu(ctx: Context, erf: int) -> ErfGelu | None:
    """The GELU around Erf node `erf` in its usual exported orders ((x * (1 + erf)) * 0.5 and
    (0.5 * x) * (1 + erf), the scale a Div by sqrt 2 or a Mul by its inverse); None for another use."""
    pre = ctx.producer(ctx.nodes[erf].input[0])
    if (
        pre is None
        or not _scaled_by(ctx, pre, 1 / math.sqrt(2))
        or ctx.only_consumer(ctx.nodes[pre].output[0]) != erf
    ):
        return None
    x = next(t for t in ctx.nodes[pre].input if not ctx.facts.is_const(t))
    add = ctx.only_consumer(ctx.nodes[erf].output[0])
    if (
        add is None
        or ctx.nodes[add].op_type != "Add"
        or not _close(ctx.scalar(ctx.other_input(add, ctx.nodes[erf].output[0]) or ""), 1.0)
    ):
        return None
    a = ctx.nodes[add].output[0]
    m1 = ctx.only_consumer(a)
    if m1 is None or ctx.nodes[m1].op_type != "Mul":
        return None
    other = ctx.other_input(m1, a)
    if other == x:  # (x * (1 + erf)) * 0.5
        m2 = ctx.only_consumer(ctx.nodes[m1].output[0])
        if m2 is None or not _scaled_by(ctx, m2, 0.5):
            return None
        return ErfGelu([pre, erf, add, m1, m2], x, ctx.nodes[m2].output[0])
    half = ctx.producer(other or "")  # (0.5 * x) * (1 + erf)
    if half is None or not _scaled_by(ctx, half, 0.5) or x not in ctx.nodes[half].input:
        return None
    if ctx.only_consumer(ctx.nodes[half].output[0]) != m1:
        return None
    return ErfGelu([pre, erf, add, m1, half], x, ctx.nodes[m1].output[0])


class GeluRecompose(Rewrite):
    """0.5 * x * (1 + Erf(x / sqrt 2)) in its usual exported orders -> Gelu(x) (opset 20)."""

    name = "gelu_recompose"
    family = "GELU"
    min_opset = 20

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for erf in ctx.runtime("Erf"):
            found = erf_gelu(ctx, erf)
            if found is not None:
                m = Match(self.name, ctx.facts.names[erf], found.nodes)
                ctx.node(m, "Gelu", [found.x], [found.y])
                out.append(m)
        return out


class GeluDecompose(Rewrite):
    """Gelu(x) -> 0.5 * x * (1 + Erf(x / sqrt 2)) (tanh approximation: its exact tanh formula)."""

    name = "gelu_decompose"
    family = "GELU"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Gelu"):
            node = ctx.nodes[i]
            x, y = node.input[0], node.output[0]
            m = Match(self.name, ctx.facts.names[i], [i])
            if ctx.attr(i, "approximate", "none") == "tanh":
                cube = ctx.node(m, "Mul", [x, ctx.node(m, "Mul", [x, x])])
                inner = ctx.node(
                    m, "Add", [x, ctx.node(m, "Mul", [cube, ctx.const(m, "c", float_array(0.044715))])]
                )
                scaled = ctx.node(m, "Mul", [inner, ctx.const(m, "s", float_array(math.sqrt(2 / math.pi)))])
                t = ctx.node(m, "Tanh", [scaled])
            else:
                t = ctx.node(
                    m, "Erf", [ctx.node(m, "Mul", [x, ctx.const(m, "r", float_array(1 / math.sqrt(2)))])]
                )
            one = ctx.node(m, "Add", [t, ctx.const(m, "one", float_array(1.0))])
            half = ctx.node(m, "Mul", [x, ctx.const(m, "half", float_array(0.5))])
            ctx.node(m, "Mul", [half, one], [y])
            out.append(m)
        return out


REWRITES: list[Rewrite] = [HardSwishRecompose(), HardSwishDecompose(), GeluRecompose(), GeluDecompose()]
