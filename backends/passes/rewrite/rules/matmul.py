"""Matrix-product forms: Einsum as MatMul, MatMul above 4-D, MatMul/Gemm as 1x1 Conv and back, MatMul+Add
as Gemm.

A MatMul with constant weights is a 1x1 convolution over the rows (rows as the batch): NPUs whose matrix
unit only takes quantized weights in a convolution (QNN HTP with int8 weights) run it there.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.passes.rewrite.rules import FUSION, Context, Match, Rewrite, int64_array


def _prod(values: list[int] | tuple[int, ...]) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n


@dataclass(frozen=True)
class _Product:
    """A two-operand Einsum `a,b->res` as a batched matrix product: indices in both operands and the
    result (batch), in one operand and the result (ms, ns), in both operands only (ks, summed)."""

    a: str
    b: str
    res: str
    size: dict[str, int]
    batch: list[str]
    ms: list[str]
    ns: list[str]
    ks: list[str]


def _product(eq: str, sa: tuple[int, ...] | None, sb: tuple[int, ...] | None) -> _Product | None:
    """The product an explicit two-operand equation over static shapes spells, or None when it is not
    one (ellipsis, a repeated index, an index summed away within one operand, or mismatched sizes)."""
    terms = _terms(eq)
    if terms is None or sa is None or sb is None:
        return None
    a, b, res = terms
    if len(a) != len(sa) or len(b) != len(sb):
        return None
    groups = _groups(a, b, res)
    if groups is None:
        return None
    batch, ms, ns, ks = groups
    size_a, size_b = dict(zip(a, sa, strict=False)), dict(zip(b, sb, strict=False))
    if any(size_a[c] != size_b[c] for c in batch + ks):
        return None
    return _Product(a, b, res, {**size_a, **size_b}, batch, ms, ns, ks)


def _terms(eq: str) -> tuple[str, str, str] | None:
    """(a, b, res) of an explicit two-operand equation without ellipsis or a repeated index; else None."""
    if "->" not in eq or "." in eq:
        return None
    lhs, res = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    a, b = terms
    if any(len(set(t)) != len(t) for t in (a, b, res)):
        return None
    return a, b, res


def _groups(a: str, b: str, res: str) -> tuple[list[str], list[str], list[str], list[str]] | None:
    """(batch, ms, ns, ks) as _Product names them; None when an operand has an index in no group."""
    batch = [c for c in res if c in a and c in b]
    ms = [c for c in res if c in a and c not in b]
    ns = [c for c in res if c in b and c not in a]
    ks = [c for c in a if c in b and c not in res]
    if set(a) != set(batch + ms + ks) or set(b) != set(batch + ns + ks):
        return None
    return batch, ms, ns, ks


class EinsumToMatMul(Rewrite):
    """Two-operand Einsum without repeated or summed-away-alone indices -> Transpose/Reshape/MatMul."""

    name = "einsum_to_matmul"
    family = "Einsum"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Einsum"):
            m = self._match(ctx, i)
            if m is not None:
                out.append(m)
        return out

    def _match(self, ctx: Context, i: int) -> Match | None:
        node = ctx.nodes[i]
        if len(node.input) != 2:
            return None
        eq = str(ctx.attr(i, "equation", "")).replace(" ", "")
        sa, sb = (ctx.facts.static_shape(t) for t in node.input)
        p = _product(eq, sa, sb)
        if p is None:
            return None
        m = Match(self.name, ctx.facts.names[i], [i])
        bshape = [p.size[c] for c in p.batch]
        mm, nn, kk = (_prod([p.size[c] for c in group]) for group in (p.ms, p.ns, p.ks))
        left = self._arrange(ctx, m, node.input[0], p.a, p.batch + p.ms + p.ks, [*bshape, mm, kk])
        right = self._arrange(ctx, m, node.input[1], p.b, p.batch + p.ks + p.ns, [*bshape, kk, nn])
        y = ctx.node(m, "MatMul", [left, right])
        full = p.batch + p.ms + p.ns
        y = ctx.node(m, "Reshape", [y, ctx.const(m, "shape", int64_array([p.size[c] for c in full]))])
        perm = [full.index(c) for c in p.res]
        ctx.node(m, "Transpose", [y], [node.output[0]], perm=perm)
        return m

    @staticmethod
    def _arrange(ctx: Context, m: Match, x: str, term: str, order: list[str], shape: list[int]) -> str:
        perm = [term.index(c) for c in order]
        if perm != list(range(len(perm))):
            x = ctx.node(m, "Transpose", [x], perm=perm)
        return ctx.node(m, "Reshape", [x, ctx.const(m, "shape", int64_array(shape))])


class MatMulTo4D(Rewrite):
    """MatMul above 4-D with equal batch shapes (or 2-D weights) -> batch axes merged, MatMul, Reshape."""

    name = "matmul_above_4d"
    family = "MatMul"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("MatMul"):
            node = ctx.nodes[i]
            sa, sb = (ctx.facts.static_shape(t) for t in node.input)
            y = ctx.facts.static_shape(node.output[0])
            if sa is None or sb is None or y is None or len(y) <= 4:
                continue
            if len(sb) != 2 and sa[:-2] != sb[:-2]:
                continue
            batch = _prod(sa[:-2])
            m = Match(self.name, ctx.facts.names[i], [i])
            a = ctx.node(
                m, "Reshape", [node.input[0], ctx.const(m, "a3d", int64_array([1, batch, *sa[-2:]]))]
            )
            b = node.input[1]
            if len(sb) != 2:
                b = ctx.node(m, "Reshape", [b, ctx.const(m, "b3d", int64_array([1, batch, *sb[-2:]]))])
            z = ctx.node(m, "MatMul", [a, b])
            ctx.node(m, "Reshape", [z, ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


class MatMulToConv(Rewrite):
    """MatMul(x[..., K], W[K, N]) (+ Add bias[N]) -> Reshape [M, K, 1, 1], 1x1 Conv, Reshape [..., N]."""

    name = "matmul_to_conv1x1"
    family = "Gemm/Conv"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("MatMul"):
            node = ctx.nodes[i]
            w = ctx.facts.value(node.input[1])
            xs, y = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
            if (
                w is None
                or w.ndim != 2
                or xs is None
                or y is None
                or len(xs) < 2
                or ctx.facts.is_const(node.input[0])
            ):
                continue
            k, n = w.shape
            nodes, out_name, bias = [i], node.output[0], None
            add = ctx.only_consumer(node.output[0])
            if add is not None and ctx.nodes[add].op_type == "Add":
                b = ctx.facts.value(ctx.other_input(add, node.output[0]) or "")
                if b is not None and b.size == n and b.shape[-1:] == (n,):
                    nodes.append(add)
                    out_name, bias = ctx.nodes[add].output[0], b.reshape(n)
            m = Match(self.name, ctx.facts.names[i], nodes)
            rows = _prod(xs[:-1])
            r = ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "rows", int64_array([rows, k, 1, 1]))])
            weight = ctx.const(m, f"{node.input[1]}/conv", w.T.reshape(n, k, 1, 1).copy())
            conv_in = [r, weight] + ([ctx.const(m, "bias", bias.astype(w.dtype))] if bias is not None else [])
            c = ctx.node(m, "Conv", conv_in, kernel_shape=[1, 1])
            ctx.node(m, "Reshape", [c, ctx.const(m, "shape", int64_array(y))], [out_name])
            out.append(m)
        return out


class GemmToConv(Rewrite):
    """Gemm(A[M, K], B const, C const) (transA = 0) -> Reshape, 1x1 Conv (alpha, beta folded), Reshape."""

    name = "gemm_to_conv1x1"
    family = "Gemm/Conv"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Gemm"):
            node = ctx.nodes[i]
            b = ctx.facts.value(node.input[1])
            xs, y = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
            if b is None or xs is None or y is None or int(ctx.attr(i, "transA", 0)):
                continue
            alpha, beta = float(ctx.attr(i, "alpha", 1.0)), float(ctx.attr(i, "beta", 1.0))
            w = (b if int(ctx.attr(i, "transB", 0)) else b.T) * alpha
            n, k = w.shape
            c = ctx.facts.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            if (
                len(node.input) > 2
                and node.input[2]
                and (c is None or c.size not in (1, n) or (c.ndim > 1 and c.shape[0] != 1))
            ):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            r = ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "nchw", int64_array([xs[0], k, 1, 1]))])
            ins = [r, ctx.const(m, f"{node.input[1]}/conv", w.reshape(n, k, 1, 1).astype(b.dtype))]
            if c is not None:
                import numpy as np

                ins.append(
                    ctx.const(m, "bias", (np.broadcast_to(c.reshape(-1), (n,)) * beta).astype(b.dtype))
                )
            conv = ctx.node(m, "Conv", ins, kernel_shape=[1, 1])
            ctx.node(m, "Reshape", [conv, ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


class ConvToGemm(Rewrite):
    """A 1x1 Conv on an [N, C, 1, 1] tensor (stride 1, no pads, group 1) -> Reshape, Gemm, Reshape."""

    name = "conv1x1_to_gemm"
    family = "Gemm/Conv"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Conv"):
            node = ctx.nodes[i]
            xs, y = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
            w = ctx.facts.value(node.input[1])
            if (
                xs is None
                or y is None
                or w is None
                or len(xs) != 4
                or xs[2:] != (1, 1)
                or w.shape[2:] != (1, 1)
            ):
                continue
            if int(ctx.attr(i, "group", 1)) != 1 or any(int(p) for p in ctx.attr(i, "pads", [0])):
                continue
            if ctx.attr(i, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            a = ctx.node(m, "Reshape", [node.input[0], ctx.const(m, "nc", int64_array(xs[:2]))])
            ins = [a, ctx.const(m, f"{node.input[1]}/fc", w.reshape(w.shape[0], w.shape[1]))]
            if len(node.input) > 2 and node.input[2]:
                ins.append(node.input[2])
            g = ctx.node(m, "Gemm", ins, transB=1)
            ctx.node(m, "Reshape", [g, ctx.const(m, "shape", int64_array(y))], [node.output[0]])
            out.append(m)
        return out


class MatMulAddToGemm(Rewrite):
    """MatMul(A[M, K], B const) + Add(bias[N]) -> Gemm (fusion switch matmul_add)."""

    name = "matmul_add_to_gemm"
    family = "fusion"
    kind = FUSION
    switch = "matmul_add"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("MatMul"):
            node = ctx.nodes[i]
            xs, b = ctx.facts.static_shape(node.input[0]), ctx.facts.value(node.input[1])
            add = ctx.only_consumer(node.output[0])
            if (
                xs is None
                or len(xs) != 2
                or b is None
                or b.ndim != 2
                or add is None
                or ctx.nodes[add].op_type != "Add"
            ):
                continue
            c = ctx.facts.value(ctx.other_input(add, node.output[0]) or "")
            if c is None or c.size != b.shape[1]:
                continue
            m = Match(self.name, ctx.facts.names[i], [i, add])
            bias = ctx.const(m, "bias", c.reshape(-1))
            ctx.node(m, "Gemm", [node.input[0], node.input[1], bias], [ctx.nodes[add].output[0]])
            out.append(m)
        return out


REWRITES: list[Rewrite] = [
    MatMulAddToGemm(),
    EinsumToMatMul(),
    MatMulTo4D(),
    MatMulToConv(),
    GemmToConv(),
    ConvToGemm(),
]
