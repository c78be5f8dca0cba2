"""Reductions and pooling: ReduceMean as GlobalAveragePool or MatMul, large GlobalAveragePool as a
cascade of small AveragePools.

Averages of equal-sized groups averaged again equal the overall mean, so a GlobalAveragePool over
12 x 80 is exactly AveragePool 6x5 -> 2x4 -> 1x4; NPUs with a small pooling window (RKNN: 7) run the
cascade. A mean over the last axis is x @ (ones / n), which runs on matrix units.
"""

from __future__ import annotations

from backends.passes.rewrite.rules import Context, Match, Rewrite, int64_array
from backends.passes.rewrite.rules.normalization import _reduce_axes

MAX_WINDOW = 7
"""Largest pooling window the cascade uses (the smallest limit among the catalog's tables)."""


class ReduceMeanToGlobalPool(Rewrite):
    """ReduceMean over all spatial axes of a 4-D or 5-D tensor -> GlobalAveragePool (+ Reshape)."""

    name = "reducemean_to_gap"
    family = "ReduceMean"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("ReduceMean"):
            node = ctx.nodes[i]
            rank = ctx.facts.rank(node.input[0])
            if rank not in (4, 5) or _reduce_axes(ctx, i) != list(range(2, rank)):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            if int(ctx.attr(i, "keepdims", 1)):
                ctx.node(m, "GlobalAveragePool", [node.input[0]], [node.output[0]])
            else:
                shape = ctx.facts.static_shape(node.output[0])
                if shape is None:
                    continue
                g = ctx.node(m, "GlobalAveragePool", [node.input[0]])
                ctx.node(m, "Reshape", [g, ctx.const(m, "shape", int64_array(shape))], [node.output[0]])
            out.append(m)
        return out


class ReduceMeanToMatMul(Rewrite):
    """ReduceMean over the last axis (keepdims) -> MatMul(x, ones(n, 1) / n)."""

    name = "reducemean_to_matmul"
    family = "ReduceMean"

    def find(self, ctx: Context) -> list[Match]:
        import numpy as np

        out = []
        for i in ctx.runtime("ReduceMean"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            if shape is None or len(shape) < 2 or _reduce_axes(ctx, i) != [len(shape) - 1]:
                continue
            if not int(ctx.attr(i, "keepdims", 1)) or ctx.dtype(node.input[0]) != 1:
                continue
            n = shape[-1]
            m = Match(self.name, ctx.facts.names[i], [i])
            w = ctx.const(m, f"{ctx.facts.names[i]}/mean_weights", np.full((n, 1), 1.0 / n, np.float32))
            ctx.node(m, "MatMul", [node.input[0], w], [node.output[0]])
            out.append(m)
        return out


def factor_windows(n: int, limit: int = MAX_WINDOW) -> list[int] | None:
    """n as a product of factors <= limit, largest first; None when a prime factor exceeds the limit."""
    out: list[int] = []
    while n > 1:
        f = next((k for k in range(min(limit, n), 1, -1) if n % k == 0), None)
        if f is None:
            return None
        out.append(f)
        n //= f
    return out


class GlobalPoolCascade(Rewrite):
    """GlobalAveragePool over H x W -> AveragePools with windows <= MAX_WINDOW (exact mean)."""

    name = "gap_to_avgpool_cascade"
    family = "ReduceMean"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("GlobalAveragePool"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            if shape is None or len(shape) != 4 or max(shape[2:]) <= MAX_WINDOW:
                continue
            fh, fw = factor_windows(shape[2]), factor_windows(shape[3])
            if fh is None or fw is None:
                continue
            stages = max(len(fh), len(fw), 1)
            fh += [1] * (stages - len(fh))
            fw += [1] * (stages - len(fw))
            m = Match(self.name, ctx.facts.names[i], [i])
            x = node.input[0]
            for k, (kh, kw) in enumerate(zip(fh, fw, strict=False)):
                last = k == stages - 1
                x = ctx.node(
                    m,
                    "AveragePool",
                    [x],
                    [node.output[0]] if last else None,
                    kernel_shape=[kh, kw],
                    strides=[kh, kw],
                )
            out.append(m)
        return out


REWRITES: list[Rewrite] = [ReduceMeanToGlobalPool(), GlobalPoolCascade(), ReduceMeanToMatMul()]
