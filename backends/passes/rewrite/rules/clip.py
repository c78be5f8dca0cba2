"""Clip forms: bounds computed at run time from constants made initializers, Clip(0, inf) as Relu, and
Clip as Max + Min where a target only runs Clip as ReLU6.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite


class ClipBoundsToConstants(Rewrite):
    """Clip whose min/max inputs are computed (from constants) at run time -> initializer bounds."""

    name = "clip_bounds_to_constants"
    family = "Clip"
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        inits = {t.name for t in ctx.model.graph.initializer}
        for i in ctx.runtime("Clip"):
            node = ctx.nodes[i]
            bounds = [t for t in node.input[1:] if t]
            if not bounds or all(t in inits for t in bounds):
                continue
            if any(ctx.facts.value(t) is None for t in bounds):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            ins = [node.input[0]]
            for t in node.input[1:]:
                ins.append(ctx.const(m, f"{t}/const", ctx.facts.values[t]) if t else "")
            ctx.node(m, "Clip", ins, [node.output[0]])
            out.append(m)
        return out


def _bounds(ctx: Context, i: int) -> tuple[float, float] | None:
    node = ctx.nodes[i]
    lo = ctx.scalar(node.input[1]) if len(node.input) > 1 and node.input[1] else float("-inf")
    hi = ctx.scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else float("inf")
    return None if lo is None or hi is None else (lo, hi)


class ClipToRelu(Rewrite):
    """Clip(x, 0, +inf) -> Relu(x)."""

    name = "clip_to_relu"
    family = "Clip"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Clip"):
            if _bounds(ctx, i) != (0.0, float("inf")):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, "Relu", [ctx.nodes[i].input[0]], [ctx.nodes[i].output[0]])
            out.append(m)
        return out


class ClipToMinMax(Rewrite):
    """Clip(x, lo, hi) -> Min(Max(x, lo), hi)."""

    name = "clip_to_max_min"
    family = "Clip"

    def find(self, ctx: Context) -> list[Match]:
        import numpy as np

        out = []
        for i in ctx.runtime("Clip"):
            b = _bounds(ctx, i)
            node = ctx.nodes[i]
            if b is None or ctx.dtype(node.input[0]) != 1:
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            x = node.input[0]
            if b[0] != float("-inf"):
                x = ctx.node(
                    m,
                    "Max",
                    [x, ctx.const(m, "lo", np.array(b[0], np.float32))],
                    [node.output[0]] if b[1] == float("inf") else None,
                )
            if b[1] != float("inf"):
                ctx.node(m, "Min", [x, ctx.const(m, "hi", np.array(b[1], np.float32))], [node.output[0]])
            if len(m.new_nodes) == 0:
                continue
            out.append(m)
        return out


REWRITES: list[Rewrite] = [ClipBoundsToConstants(), ClipToRelu(), ClipToMinMax()]
