"""Forms real exporters write that converters reject, spelled the way every converter reads.

Keras and TF exports keep `auto_pad: SAME_UPPER/SAME_LOWER` (onnx2torch: "not implemented"); PyTorch
writes `Reshape allowzero=1` (onnx2torch: "not implemented"); exporters compute Reshape and Expand
shapes at run time from `Shape` ops, or with `0`/`-1` entries, which converters that trace the graph at
their own size resolve wrongly (onnx2tf reshaping 5248 elements to [1,4,16,64]); TF exports (tf2onnx)
take a mean or max over the last axis of a `[batch, tokens, features]` tensor with GlobalAveragePool or
GlobalMaxPool, which converters read as a 1-D pool over channels-first data (onnx2tf transposes it
and stops at the LayerNorm's next Sub; coremltools has no GlobalMaxPool). With the model's input
shapes fixed (the import stage), every one of these has one explicit static equivalent. All are exact.
"""

from __future__ import annotations

import math
from typing import Any

from backends.passes.rewrite.rules import CLEANUP, Context, Match, Rewrite, float_array, int64_array
from backends.passes.rewrite.rules.activations import ErfGelu, erf_gelu
from backends.passes.rewrite.rules.fold import ConstantFolding
from backends.passes.rewrite.rules.recurrent import rewrites as recurrent_rewrites

_PADDED = ("Conv", "MaxPool", "AveragePool", "LpPool")


class ExplicitPads(Rewrite):
    """auto_pad SAME_UPPER / SAME_LOWER / VALID -> auto_pad NOTSET with the pads it implies at the
    input's static size: total = max(0, (ceil(in / s) - 1) * s + (k - 1) * d + 1 - in) per axis, the odd
    pixel at the end (SAME_UPPER) or the beginning (SAME_LOWER)."""

    name = "explicit_pads"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(_PADDED):
            mode = str(ctx.attr(i, "auto_pad", "NOTSET"))
            if mode not in ("SAME_UPPER", "SAME_LOWER", "VALID"):
                continue
            pads = self._pads(ctx, i, mode)
            if pads is None:
                continue
            node = ctx.nodes[i]
            m = Match(self.name, ctx.facts.names[i], [i])
            attrs = {a.name: _value(a) for a in node.attribute if a.name not in ("auto_pad", "pads")}
            ctx.node(m, node.op_type, list(node.input), list(node.output), **attrs, pads=pads)
            out.append(m)
        return out

    def _pads(self, ctx: Context, i: int, mode: str) -> list[int] | None:
        node = ctx.nodes[i]
        x = ctx.facts.static_shape(node.input[0])
        kernel = ctx.attr(i, "kernel_shape")
        if kernel is None and node.op_type == "Conv":
            w = ctx.facts.static_shape(node.input[1]) if len(node.input) > 1 else None
            kernel = None if w is None else list(w[2:])
        if x is None or kernel is None:
            return None
        spatial = list(x[2:])
        if len(spatial) != len(kernel):
            return None
        strides = list(ctx.attr(i, "strides") or [1] * len(kernel))
        dilations = list(ctx.attr(i, "dilations") or [1] * len(kernel))
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            total = 0 if mode == "VALID" else max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(small if mode != "SAME_LOWER" else big)
            end.append(big if mode != "SAME_LOWER" else small)
        return begin + end


def _value(attr: object) -> object:
    from onnx import helper

    return helper.get_attribute_value(attr)  # type: ignore[arg-type]


class StaticShape(Rewrite):
    """Reshape and Expand whose output shape is static, with a shape that is computed at run time, holds
    `0` or `-1`, or is read with allowzero=1 -> the same op with the explicit output shape (Reshape
    without allowzero: no dimension of a static shape is a placeholder)."""

    name = "static_shape"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(("Reshape", "Expand")):
            node = ctx.nodes[i]
            want = ctx.facts.static_shape(node.output[0])
            if want is None or 0 in want or len(node.input) < 2 or not self._implicit(ctx, i, want):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            shape = ctx.const(m, f"{ctx.facts.names[i]}/shape", int64_array(want))
            ctx.node(m, node.op_type, [node.input[0], shape], list(node.output))
            out.append(m)
        return out

    def _implicit(self, ctx: Context, i: int, want: tuple[int, ...]) -> bool:
        node = ctx.nodes[i]
        given = node.input[1]
        initializer = any(t.name == given for t in ctx.model.graph.initializer)
        value = ctx.facts.value(given)
        if not initializer or value is None:
            return True  # computed: from Shape ops, a Constant node, or at run time
        if node.op_type == "Expand":
            return [int(v) for v in value.reshape(-1)] != list(want)
        return bool(ctx.attr(i, "allowzero", 0)) or any(int(v) in (0, -1) for v in value.reshape(-1))


_IMAGE_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "BatchNormalization")
"""Ops that read axis 1 of a rank-4 tensor as its channels: the layout onnx2tf converts them in."""
_UNARY = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Elu", "HardSigmoid", "HardSwish", "Identity")


class SqueezeAsReshape(Rewrite):
    """A rank-3 tensor unsqueezed into an image for a 2-D convolution, and a convolution's output (after
    its activation) squeezed back to rank 3, with static shapes -> Reshapes to the same shapes (the same
    elements in the same order). onnx2tf lays rank-3 and rank-4 tensors out channels-last and maps the
    axes of a Squeeze or Unsqueeze between them wrongly: an EEG net's `[1, 100, T]` unsqueezed to
    `[1, 1, 100, T]` reached its convolution as `[1, 1, T + 4, 100]` ("Depth of output (20) is not a
    multiple of the number of groups (100)"), and the Squeeze of the height axis after the next one
    removed the width. onnx2tf converts those Reshapes in the ONNX layout. Other Squeezes stay: where
    no convolution reads or writes the image, onnx2tf's own layout handling converts them."""

    name = "squeeze_as_reshape"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(("Squeeze", "Unsqueeze")):
            node = ctx.nodes[i]
            given, want = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
            if given is None or want is None or not self._around_image_op(ctx, i, len(given), len(want)):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            shape = ctx.const(m, f"{ctx.facts.names[i]}/shape", int64_array(list(want)))
            ctx.node(m, "Reshape", [node.input[0], shape], list(node.output))
            out.append(m)
        return out

    @staticmethod
    def _around_image_op(ctx: Context, i: int, given: int, want: int) -> bool:
        node = ctx.nodes[i]
        if node.op_type == "Unsqueeze" and (given, want) == (3, 4):
            readers = ctx.consumers(node.output[0])
            return bool(readers) and all(ctx.nodes[r].op_type in _IMAGE_OPS for r in readers)
        if node.op_type == "Squeeze" and (given, want) == (4, 3):
            j = ctx.producer(node.input[0])
            while j is not None and ctx.nodes[j].op_type in _UNARY:
                j = ctx.producer(ctx.nodes[j].input[0])
            return j is not None and ctx.nodes[j].op_type in _IMAGE_OPS
        return False


class SameShape(Rewrite):
    """Reshape or Expand to the static shape its input already has -> its input, read directly. JAX and
    TF exports broadcast a LayerNorm's statistics to the shape they have (`BroadcastTo` [1, 1] -> [1, 1]);
    traced through onnx2torch, coremltools builds that broadcast's shape from nothing ("Concat got 0
    values")."""

    name = "same_shape"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(("Reshape", "Expand")):
            node = ctx.nodes[i]
            given, want = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
            if given is None or given != want or node.output[0] in ctx.facts.graph_outputs:
                continue
            out.append(Match(self.name, ctx.facts.names[i], [i], renames={node.output[0]: node.input[0]}))
        return out


def _clamps(ctx: Context) -> list[tuple[int, Any, str]]:
    """Each Max / Min of a tensor and a one-element constant at the tensor's own shape (no broadcast):
    (its node index, the bound as a 0-d array, the tensor)."""
    out = []
    for i in ctx.runtime(("Max", "Min")):
        node = ctx.nodes[i]
        if len(node.input) != 2:
            continue
        values = [ctx.facts.value(x) for x in node.input]
        if sum(v is not None for v in values) != 1:
            continue
        bound, x = (values[0], node.input[1]) if values[0] is not None else (values[1], node.input[0])
        shape = ctx.facts.static_shape(x)
        if (
            bound is None
            or bound.size != 1
            or shape is None
            or shape != ctx.facts.static_shape(node.output[0])
        ):
            continue
        out.append((i, bound.reshape(()).copy(), x))
    return out


class ClampByConstant(Rewrite):
    """Max / Min of a tensor and a one-element constant -> Clip with that bound (min for Max, max for
    Min), at the tensor's shape. JAX exports clamp with a scalar (`Max(0.0, variance)` in a LayerNorm);
    onnx2torch writes every Max / Min as broadcast_to + stack + amax, which coremltools does not
    convert ("Concat got 0 values" for the 0-d bound, then "broadcast_to not implemented"), and every
    converter maps Clip to its own clamp."""

    name = "clamp_by_constant"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i, bound, x in _clamps(ctx):
            node = ctx.nodes[i]
            m = Match(self.name, ctx.facts.names[i], [i])
            if ctx.facts.opset >= 11:
                name = ctx.const(m, f"{m.anchor}/bound", bound)
                ctx.node(m, "Clip", [x, name] if node.op_type == "Max" else [x, "", name], list(node.output))
            else:
                side = "min" if node.op_type == "Max" else "max"
                ctx.node(m, "Clip", [x], list(node.output), **{side: float(bound)})
            out.append(m)
        return out


class UnboundedClamp(Rewrite):
    """Max of a tensor and -inf, or Min of it and +inf (a one-element constant) -> the tensor itself.
    jax2tf writes a `maximum(x, -inf)` before a softmax's reductions (magika); it bounds nothing, and
    a quantizer that reads the bound as a range gets infinities and NaN (rknn-toolkit2: "cannot
    convert float NaN to integer"). Exact, NaN included (both propagate it)."""

    name = "unbounded_clamp"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i, bound, x in _clamps(ctx):
            node = ctx.nodes[i]
            if bound.item() != (-math.inf if node.op_type == "Max" else math.inf):
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, "Identity", [x], list(node.output))
            out.append(m)
        return out


class ClipBounds(Rewrite):
    """A Clip (opset 11+) with an absent bound written as an empty input name -> the trailing empty name
    dropped, a leading one (no min, a max) given the dtype's lowest finite value. PyTorch writes
    `clamp(min=1)` as Clip(x, min, ""); onnx2torch looks every named bound up as a constant and stops
    at the empty name ("Dynamic value of min/max is not implemented"). The same values for every
    input but -inf, which the lowest finite bound clamps to that value."""

    name = "clip_bounds"
    family = "converter forms"
    kind = CLEANUP
    exact = False

    def find(self, ctx: Context) -> list[Match]:
        import numpy as np
        from onnx import helper

        out: list[Match] = []
        if ctx.facts.opset < 11:
            return out
        for i in ctx.runtime("Clip"):
            node = ctx.nodes[i]
            inputs = list(node.input)
            if "" not in inputs[1:]:
                continue
            while inputs and inputs[-1] == "":
                inputs.pop()
            m = Match(self.name, ctx.facts.names[i], [i])
            if len(inputs) == 3 and inputs[1] == "":
                dtype = helper.tensor_dtype_to_np_dtype(ctx.dtype(inputs[0]))
                if dtype.kind != "f":
                    continue
                inputs[1] = ctx.const(m, f"{m.anchor}/lowest", np.asarray(np.finfo(dtype).min, dtype))
            ctx.node(m, "Clip", inputs, list(node.output))
            out.append(m)
        return out


class PReluRank4(Rewrite):
    """PRelu of a rank-2 or rank-3 tensor with slopes that differ -> the same PRelu on the tensor with
    trailing axes of 1 up to rank 4, reshaped back (the slope gets the same trailing axes, so each
    value meets the same slope). Keras exports end in a Dense + per-unit PReLU over `[N, C]`, which
    coremltools takes at rank 4 only ("rank 3 or rank 5 input is only supported when all the values
    of alpha are same")."""

    name = "prelu_rank4"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("PRelu"):
            node = ctx.nodes[i]
            shape, slope = ctx.facts.static_shape(node.input[0]), ctx.facts.value(node.input[1])
            if shape is None or len(shape) not in (2, 3) or slope is None or slope.ndim > len(shape):
                continue
            if slope.size < 2 or (slope == slope.reshape(-1)[0]).all():
                continue
            pad = (1,) * (4 - len(shape))
            m = Match(self.name, ctx.facts.names[i], [i])
            wide = ctx.const(m, f"{m.anchor}/rank4", int64_array([*shape, *pad]))
            slope4 = ctx.const(m, f"{m.anchor}/slope", slope.reshape(slope.shape + pad).copy())
            back = ctx.const(m, f"{m.anchor}/shape", int64_array(list(shape)))
            x4 = ctx.node(m, "Reshape", [node.input[0], wide])
            y4 = ctx.node(m, "PRelu", [x4, slope4])
            ctx.node(m, "Reshape", [y4, back], list(node.output))
            out.append(m)
        return out


class GeluAsConverted(Rewrite):
    """An exact GELU written with Erf -> the one spelling converters recognise as GELU: Div(x, [sqrt 2])
    -> Erf -> Add([1]) -> Mul(x, .) -> Mul([0.5]), its constants one-element tensors. onnx2tf maps that
    chain to TF's GELU (TFLite's builtin, quantized to int8) and anything else to Erf, which TFLite has
    only as a Select-TF (Flex) op no integer kernel runs; it compares a 0-d constant with sqrt 2 in
    float64 and misses Paddle's and PyTorch's float32 scalars (PP-OCRv6: FlexErf x13)."""

    name = "gelu_as_converted"
    family = "converter forms"
    kind = CLEANUP

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for erf in ctx.runtime("Erf"):
            found = erf_gelu(ctx, erf)
            if found is None or self._spelled(ctx, found):
                continue
            m = Match(self.name, ctx.facts.names[erf], found.nodes)
            one_was = ctx.facts.value(ctx.other_input(found.nodes[2], ctx.nodes[erf].output[0]) or "")
            dtype = None if one_was is None else one_was.dtype  # the model's float type (fp16 exports too)
            scaled = ctx.node(
                m, "Div", [found.x, ctx.const(m, f"{m.anchor}/sqrt2", float_array([math.sqrt(2)], dtype))]
            )
            one = ctx.node(
                m,
                "Add",
                [ctx.node(m, "Erf", [scaled]), ctx.const(m, f"{m.anchor}/one", float_array([1.0], dtype))],
            )
            times = ctx.node(m, "Mul", [found.x, one])
            ctx.node(
                m, "Mul", [times, ctx.const(m, f"{m.anchor}/half", float_array([0.5], dtype))], [found.y]
            )
            out.append(m)
        return out

    @staticmethod
    def _spelled(ctx: Context, found: ErfGelu) -> bool:
        """Already in that spelling, constants and input order included."""
        pre, _, add, m1, m2 = (ctx.nodes[i] for i in found.nodes)
        ones = [ctx.facts.value(n.input[1]) for n in (pre, add, m2)]
        return (
            pre.op_type == "Div"
            and m1.input[0] == found.x
            and all(v is not None and v.shape == (1,) for v in ones)
        )


class SplitAsSlices(Rewrite):
    """At opset 18 and later, a Split with static output sizes -> one Slice per output (the same
    elements). Split's opset-18 form (`num_outputs`) has no onnx2torch converter, so Core ML's route
    stops at every Split of a model exported at opset 18+ (a YOLOv8-seg export at 19: "Converter is not
    implemented ... Split, version=18"); Slice's last form is opset 13's, which it has."""

    name = "split_as_slices"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        if ctx.facts.opset < 18:
            return []
        out = []
        for i in ctx.runtime("Split"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            sizes = [ctx.facts.static_shape(o) for o in node.output]
            if shape is None or any(s is None for s in sizes) or not all(node.output):
                continue
            axis = int(ctx.attr(i, "axis", 0)) % len(shape)
            m = Match(self.name, ctx.facts.names[i], [i])
            start = 0
            for k, (output, size) in enumerate(zip(node.output, sizes, strict=True)):
                assert size is not None
                end = start + size[axis]
                bounds = [
                    ctx.const(m, f"{m.anchor}/{k}/{what}", int64_array([v]))
                    for what, v in (("start", start), ("end", end), ("axis", axis))
                ]
                ctx.node(m, "Slice", [node.input[0], *bounds], [output])
                start = end
            out.append(m)
        return out


class ReversedSlice(Rewrite):
    """A Slice with a negative step on one axis of a static shape -> a Gather of the indices it picks
    (the same elements, in the same order). PyTorch writes `x.flip(0)` / `x[::-1]` as Slice(-1,
    -INT64_MAX, step -1) (a bidirectional LSTM unrolled by hand reverses its sequence so); onnx2torch
    rebuilds it with a flip whose length coremltools then infers short ("Dimension mismatch in concat:
    [20, 1, 100] vs. (18, 1, 100)"). A constant index list has one reading everywhere."""

    name = "reversed_slice"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        import numpy as np

        out = []
        for i in ctx.runtime("Slice"):
            node = ctx.nodes[i]
            shape = ctx.facts.static_shape(node.input[0])
            bounds = [
                ctx.facts.value(n) if n else None for n in list(node.input[1:]) + [""] * (5 - len(node.input))
            ]
            starts, ends, axes, steps = bounds
            if shape is None or starts is None or ends is None or steps is None or starts.size != 1:
                continue
            step = int(steps.reshape(-1)[0])
            axis = int(axes.reshape(-1)[0]) if axes is not None else 0
            if step >= 0 or not -len(shape) <= axis < len(shape):
                continue
            axis %= len(shape)
            picked = np.arange(shape[axis])[int(starts.reshape(-1)[0]) : int(ends.reshape(-1)[0]) : step]
            if picked.size == 0:
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            index = ctx.const(m, f"{m.anchor}/indices", int64_array(picked.tolist()))
            ctx.node(m, "Gather", [node.input[0], index], list(node.output), axis=axis)
            out.append(m)
        return out


_REDUCE = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}


class GlobalPoolReduce(Rewrite):
    """GlobalAveragePool / GlobalMaxPool of a rank-3 tensor -> ReduceMean / ReduceMax over its last axis,
    kept (the same values: a global pool averages every axis after the second). Image pools (rank 4)
    stay pools, which every converter maps to its own pooling op."""

    name = "global_pool_reduce"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(tuple(_REDUCE)):
            node = ctx.nodes[i]
            if ctx.facts.rank(node.input[0]) != 3:
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            op = _REDUCE[node.op_type]
            if ctx.facts.opset >= 18:
                axes = ctx.const(m, f"{m.anchor}/axes", int64_array([2]))
                ctx.node(m, op, [node.input[0], axes], list(node.output), keepdims=1)
            else:
                ctx.node(m, op, [node.input[0]], list(node.output), axes=[2], keepdims=1)
            out.append(m)
        return out


class ReflectPadTrailing(Rewrite):
    """A reflect Pad whose padded axes are not the trailing ones coremltools pads (the last of a rank-3
    tensor, the last two of rank 4, the last three of rank 5) -> the padded axes moved last (Transpose),
    the others merged into one (Reshape to rank 2 + the padded axes), padded there, and put back. TF's
    `reflection_pad1d` pads the time axis of `[batch, time, channels]` (basic-pitch's CQT), a PyTorch
    STFT pads the samples of a `[1, N]` signal (silero-vad): "reflect padding is implemented for padding
    the last 3 dimensions of 5D input tensor, or the last 2 ... of 4D, or the last dimension of 3D"."""

    name = "reflect_pad_trailing"
    family = "converter forms"
    kind = CLEANUP
    exact = True

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Pad"):
            node = ctx.nodes[i]
            if ctx.attr(i, "mode", "constant") != "reflect" or len(node.input) > 3:  # no `axes` input
                continue
            shape, pads = ctx.facts.static_shape(node.input[0]), ctx.facts.value(node.input[1])
            if shape is None or pads is None or pads.size != 2 * len(shape):
                continue
            rank = len(shape)
            before, after = [int(p) for p in pads[:rank]], [int(p) for p in pads[rank:]]
            padded = [a for a in range(rank) if before[a] or after[a]]
            if not padded or len(padded) > 3 or (rank in (3, 4, 5) and min(padded) >= 2):
                continue
            kept = [a for a in range(rank) if a not in padded]
            perm = kept + padded
            m = Match(self.name, ctx.facts.names[i], [i])
            x = node.input[0]
            if perm != list(range(rank)):
                x = ctx.node(m, "Transpose", [x], perm=perm)
            flat = [1, math.prod(shape[a] for a in kept), *[shape[a] for a in padded]]
            x = ctx.node(m, "Reshape", [x, ctx.const(m, f"{m.anchor}/flat", int64_array(flat))])
            wide = [0, 0, *[before[a] for a in padded], 0, 0, *[after[a] for a in padded]]
            x = ctx.node(m, "Pad", [x, ctx.const(m, f"{m.anchor}/pads", int64_array(wide))], mode="reflect")
            grown = [shape[a] for a in kept] + [shape[a] + before[a] + after[a] for a in padded]
            back = ctx.const(m, f"{m.anchor}/grown", int64_array(grown))
            if perm == list(range(rank)):
                ctx.node(m, "Reshape", [x, back], list(node.output))
            else:
                x = ctx.node(m, "Reshape", [x, back])
                inverse = [perm.index(a) for a in range(rank)]
                ctx.node(m, "Transpose", [x], list(node.output), perm=inverse)
            out.append(m)
        return out


REWRITES: list[Rewrite] = [
    ConstantFolding(),
    *recurrent_rewrites(),
    SameShape(),
    UnboundedClamp(),
    ClampByConstant(),
    ClipBounds(),
    PReluRank4(),
    GeluAsConverted(),
    SplitAsSlices(),
    ReversedSlice(),
    ExplicitPads(),
    StaticShape(),
    SqueezeAsReshape(),
    GlobalPoolReduce(),
    ReflectPadTrailing(),
]
"""Constant subgraphs first (a Shape of a weight, its ReduceProd: onnx2tf turns them into values no
Keras layer outputs; a recurrent layer's weights computed from constants), the recurrent layers
unrolled, then the forms that read the static shapes folding leaves."""
