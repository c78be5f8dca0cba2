"""Fusions this pass performs itself (each behind its rewrite.fusion switch): Conv + BatchNormalization.

Conv+activation fusion has no standard ONNX op; it is left to the target's compiler, which reads the
same switch at compile time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.passes.rewrite.rules import FUSION, Context, Match, Rewrite

if TYPE_CHECKING:
    import onnx


class ConvBatchNorm(Rewrite):
    """Conv -> BatchNormalization (inference) -> one Conv with scaled weights and shifted bias."""

    name = "conv_bn_fold"
    family = "fusion"
    kind = FUSION
    switch = "conv_bn"

    def find(self, ctx: Context) -> list[Match]:
        import numpy as np

        out = []
        for i in ctx.runtime("Conv"):
            node = ctx.nodes[i]
            bn = ctx.only_consumer(node.output[0])
            if bn is None or ctx.nodes[bn].op_type != "BatchNormalization" or len(ctx.nodes[bn].output) != 1:
                continue
            w = ctx.facts.value(node.input[1])
            params = [ctx.facts.value(t) for t in ctx.nodes[bn].input[1:5]]
            bias = ctx.facts.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if (
                w is None
                or any(p is None for p in params)
                or (len(node.input) > 2 and node.input[2] and bias is None)
            ):
                continue
            scale, beta, mean, var = (np.asarray(p, np.float64) for p in params)
            eps = float(ctx.attr(bn, "epsilon", 1e-5))
            factor = scale / np.sqrt(var + eps)
            b0 = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
            new_w = (w.astype(np.float64) * factor.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
            new_b = ((b0 - mean) * factor + beta).astype(w.dtype)
            m = Match(self.name, ctx.facts.names[i], [i, bn])
            ins = [
                node.input[0],
                ctx.const(m, f"{node.input[1]}/bn", new_w),
                ctx.const(m, f"{node.name}/bn_bias", new_b),
            ]
            attrs = {a.name: _value(a) for a in node.attribute}
            ctx.node(m, "Conv", ins, [ctx.nodes[bn].output[0]], **attrs)
            out.append(m)
        return out


def _value(attr: onnx.AttributeProto) -> object:
    from onnx import helper

    return helper.get_attribute_value(attr)


REWRITES: list[Rewrite] = [ConvBatchNorm()]
