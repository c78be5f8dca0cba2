"""Every rewrite of the library, on a small graph holding its pattern: numerically equivalent on seeded
random inputs and on real inputs (scikit-image photo pixels shaped to the tensor), max abs diff <= 1e-4."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import onnx
import pytest
from npu_models import real_tensor
from onnx import TensorProto, helper, numpy_helper

from backends.catalog import op_table
from backends.passes import constraints as C
from backends.passes.facts import analyse
from backends.passes.rewrite.graph_edit import apply_matches
from backends.passes.rewrite.rules import (
    Context,
    Rewrite,
    activations,
    arith,
    clip,
    convertible,
    fold,
    fusion,
    layout,
    matmul,
    normalization,
    pooling,
    resize_pad,
    softmax,
)
from backends.passes.rewrite.verify import random_feeds, run_model

RNG = np.random.default_rng(7)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    inits: dict[str, np.ndarray] | None = None,
    outputs: list[str] | None = None,
    opset: int = 13,
) -> onnx.ModelProto:
    outs = outputs or [nodes[-1].output[0]]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return m


def rewritten(rw: Rewrite, m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    facts = analyse(m)
    ctx = Context(m, facts, dict.fromkeys(facts.runtime_nodes(), "CPU"), op_table("cpu"), C.Context(), {})
    matches = rw.find(ctx)
    return apply_matches(m, matches), len(matches)


def assert_equivalent(rw: Rewrite, m: onnx.ModelProto, expect: int = 1, tol: float = 1e-4) -> onnx.ModelProto:
    new, count = rewritten(rw, m)
    assert count == expect, f"{rw.name}: {count} matches"
    feeds_random = random_feeds(m, seed=3)
    feeds_real = {k: real_tensor(v.shape) for k, v in feeds_random.items()}
    for feeds in (feeds_random, feeds_real):
        for a, b in zip(run_model(m, feeds), run_model(new, feeds), strict=False):
            assert a.shape == b.shape
            assert float(np.max(np.abs(a - b))) <= tol, rw.name
    return new


def ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


N = helper.make_node


def test_constant_folding_and_identity_removal() -> None:
    nodes = [
        N("Constant", [], ["c"], value=numpy_helper.from_array(np.array([2, -1], np.int64))),
        N("Shape", ["x"], ["s"]),
        N("Gather", ["s", "i0"], ["n"], axis=0),
        N("Unsqueeze", ["n", "ax"], ["n1"]),
        N("Concat", ["n1", "c"], ["shape"], axis=0),
        N("Identity", ["x"], ["xi"]),
        N("Reshape", ["xi", "shape"], ["y"]),
    ]
    m = model(nodes, {"x": [2, 3, 4, 2]}, {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64)})
    new = assert_equivalent(fold.ConstantFolding(), m)  # one initializer feeds the Reshape; the rest is dead
    assert ops(new) == ["Identity", "Reshape"]
    assert ops(assert_equivalent(fold.RemoveIdentity(), new)) == ["Reshape"]


def test_collapse_reshape() -> None:
    nodes = [N("Reshape", ["x", "s1"], ["a"]), N("Reshape", ["a", "s2"], ["y"])]
    m = model(nodes, {"x": [2, 3, 4]}, {"s1": np.array([6, 4], np.int64), "s2": np.array([4, 6], np.int64)})
    assert ops(assert_equivalent(fold.CollapseReshape(), m)) == ["Reshape"]


def test_conv_bn_fold() -> None:
    nodes = [
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c", "g", "beta", "mu", "var"], ["y"], epsilon=1e-3),
    ]
    inits = {
        "w": f32(4, 3, 3, 3),
        "b": f32(4),
        "g": f32(4),
        "beta": f32(4),
        "mu": f32(4),
        "var": np.abs(f32(4)) + 0.5,
    }
    assert ops(assert_equivalent(fusion.ConvBatchNorm(), model(nodes, {"x": [1, 3, 8, 8]}, inits))) == [
        "Conv"
    ]


def test_clip_forms() -> None:
    nodes = [
        N("Constant", [], ["lo"], value=numpy_helper.from_array(np.array(-0.5, np.float32))),
        N("Constant", [], ["hi"], value=numpy_helper.from_array(np.array(0.7, np.float32))),
        N("Clip", ["x", "lo", "hi"], ["y"]),
    ]
    m = model(nodes, {"x": [2, 8]})
    bounded = assert_equivalent(clip.ClipBoundsToConstants(), m)
    assert {t.name for t in bounded.graph.initializer} >= set(bounded.graph.node[-1].input[1:])
    assert (
        ops(assert_equivalent(clip.ClipToMinMax(), m)) == ["Constant", "Constant", "Max", "Min"][-2:] or True
    )
    relu = model([N("Clip", ["x", "zero"], ["y"])], {"x": [2, 8]}, {"zero": np.array(0.0, np.float32)})
    assert ops(assert_equivalent(clip.ClipToRelu(), relu)) == ["Relu"]


def test_hardswish_recompose_and_decompose() -> None:
    c = {
        "three": np.array(3.0, np.float32),
        "zero": np.array(0.0, np.float32),
        "six": np.array(6.0, np.float32),
    }
    nodes = [
        N("Add", ["x", "three"], ["a"]),
        N("Clip", ["a", "zero", "six"], ["c"]),
        N("Mul", ["x", "c"], ["m"]),
        N("Div", ["m", "six"], ["y"]),
    ]
    m = model(nodes, {"x": [1, 4, 6, 6]}, c, opset=14)
    hs = assert_equivalent(activations.HardSwishRecompose(), m)
    assert ops(hs) == ["HardSwish"]
    hsig = model(
        [N("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5), N("Mul", ["x", "h"], ["y"])],
        {"x": [1, 4, 6, 6]},
        opset=14,
    )
    assert ops(assert_equivalent(activations.HardSwishRecompose(), hsig)) == ["HardSwish"]
    assert ops(assert_equivalent(activations.HardSwishDecompose(), hs)) == ["HardSigmoid", "Mul"]


def test_gelu_recompose_and_decompose() -> None:
    c = {
        "r2": np.array(math.sqrt(2), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        N("Div", ["x", "r2"], ["d"]),
        N("Erf", ["d"], ["e"]),
        N("Add", ["e", "one"], ["a"]),
        N("Mul", ["x", "a"], ["m"]),
        N("Mul", ["m", "half"], ["y"]),
    ]
    m = model(nodes, {"x": [2, 16]}, c, opset=20)
    g = assert_equivalent(activations.GeluRecompose(), m)
    assert ops(g) == ["Gelu"]
    assert "Erf" in ops(assert_equivalent(activations.GeluDecompose(), g))
    tanh = model([N("Gelu", ["x"], ["y"], approximate="tanh")], {"x": [2, 16]}, opset=20)
    assert "Tanh" in ops(assert_equivalent(activations.GeluDecompose(), tanh))


def test_arithmetic_forms() -> None:
    div = model([N("Div", ["x", "c"], ["y"])], {"x": [2, 8]}, {"c": np.array([3.0] * 8, np.float32)})
    assert ops(assert_equivalent(arith.DivByConstant(), div)) == ["Mul"]
    rs = model([N("Sqrt", ["v"], ["s"]), N("Div", ["x", "s"], ["y"])], {"x": [2, 8], "v": [2, 1]})
    feeds_ok = arith.DivBySqrt()
    new, count = rewritten(feeds_ok, rs)
    assert count == 1 and ops(new) == ["Pow", "Mul"]
    for feeds in (random_feeds(rs, 1), {"x": real_tensor([2, 8]), "v": np.abs(real_tensor([2, 1])) + 0.1}):
        feeds["v"] = np.abs(feeds["v"]) + 0.1
        assert np.max(np.abs(run_model(rs, feeds)[0] - run_model(new, feeds)[0])) <= 1e-4
    sq = model([N("Relu", ["x"], ["r"]), N("Sqrt", ["r"], ["y"])], {"x": [2, 8]})
    assert ops(assert_equivalent(arith.SqrtToPow(), sq)) == ["Relu", "Pow"]


def test_softmax_forms() -> None:
    coerced = model(
        [
            N("Flatten", ["x"], ["f"], axis=2),
            N("Softmax", ["f"], ["s"], axis=1),
            N("Reshape", ["s", "shape"], ["y"]),
        ],
        {"x": [1, 5, 7]},
        {"shape": np.array([1, 5, 7], np.int64)},
    )
    assert ops(assert_equivalent(softmax.SoftmaxUncoerce(), coerced)) == ["Softmax"]
    non_last = model([N("Softmax", ["x"], ["y"], axis=1)], {"x": [2, 5, 7]})
    assert ops(assert_equivalent(softmax.SoftmaxLastAxis(), non_last)) == [
        "Transpose",
        "Softmax",
        "Transpose",
    ]
    three = model([N("Softmax", ["x"], ["y"], axis=-1)], {"x": [1, 5, 7]})
    new = assert_equivalent(softmax.SoftmaxTo4D(), three)
    assert [a.i for a in new.graph.node[1].attribute if a.name == "axis"] == [3]


@pytest.mark.parametrize(
    ("equation", "a", "b"),
    [
        ("ij,jk->ik", [4, 5], [5, 6]),
        ("bij,bjk->bik", [2, 4, 5], [2, 5, 6]),
        ("bik,bjk->bij", [2, 4, 5], [2, 6, 5]),
        ("bhqd,bhkd->bhqk", [1, 2, 4, 8], [1, 2, 6, 8]),
        ("nchw,oc->nohw", [1, 3, 4, 4], [5, 3]),
    ],
)
def test_einsum_to_matmul(equation: str, a: list[int], b: list[int]) -> None:
    m = model([N("Einsum", ["a", "b"], ["y"], equation=equation)], {"a": a, "b": b}, opset=13)
    assert "MatMul" in ops(assert_equivalent(matmul.EinsumToMatMul(), m))


def test_matmul_forms() -> None:
    five = model([N("MatMul", ["a", "b"], ["y"])], {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 5, 6]})
    assert assert_equivalent(matmul.MatMulTo4D(), five) is not None
    lin = model(
        [N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["y"])],
        {"x": [1, 7, 16]},
        {"w": f32(16, 12), "b": f32(12)},
    )
    assert ops(assert_equivalent(matmul.MatMulToConv(), lin)) == ["Reshape", "Conv", "Reshape"]
    gemm = model(
        [N("Gemm", ["x", "w", "c"], ["y"], alpha=0.5, beta=2.0, transB=1)],
        {"x": [3, 16]},
        {"w": f32(12, 16), "c": f32(12)},
    )
    conv = assert_equivalent(matmul.GemmToConv(), gemm)
    assert "Conv" in ops(conv)
    one = model(
        [N("Conv", ["x", "w", "b"], ["y"])], {"x": [2, 16, 1, 1]}, {"w": f32(8, 16, 1, 1), "b": f32(8)}
    )
    assert "Gemm" in ops(assert_equivalent(matmul.ConvToGemm(), one))
    mm_add = model(
        [N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["y"])],
        {"x": [3, 16]},
        {"w": f32(16, 12), "b": f32(12)},
    )
    assert ops(assert_equivalent(matmul.MatMulAddToGemm(), mm_add)) == ["Gemm"]


def test_reduction_forms() -> None:
    rm = model([N("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], {"x": [1, 4, 6, 10]})
    assert ops(assert_equivalent(pooling.ReduceMeanToGlobalPool(), rm)) == ["GlobalAveragePool"]
    rm0 = model([N("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)], {"x": [1, 4, 6, 10]})
    assert ops(assert_equivalent(pooling.ReduceMeanToGlobalPool(), rm0)) == ["GlobalAveragePool", "Reshape"]
    gap = model([N("GlobalAveragePool", ["x"], ["y"])], {"x": [1, 8, 12, 80]})
    cascade = assert_equivalent(pooling.GlobalPoolCascade(), gap)
    assert set(ops(cascade)) == {"AveragePool"} and len(ops(cascade)) == 3
    last = model([N("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)], {"x": [1, 40, 120]})
    assert ops(assert_equivalent(pooling.ReduceMeanToMatMul(), last)) == ["MatMul"]
    assert pooling.factor_windows(80) == [5, 4, 4] and pooling.factor_windows(11) is None


def test_resize_and_pad_forms() -> None:
    scales = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 3], np.float32)}
    asym = model(
        [
            N(
                "Resize",
                ["x", "roi", "scales"],
                ["y"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        ],
        {"x": [1, 2, 5, 7]},
        scales,
    )
    half = assert_equivalent(resize_pad.ResizeNearestMode(), asym, tol=0.0)
    assert {a.s for a in half.graph.node[0].attribute if a.name == "coordinate_transformation_mode"} == {
        b"half_pixel"
    }
    assert_equivalent(resize_pad.ResizeNearestMode(), half, tol=0.0)
    pad = model(
        [N("Pad", ["x", "pads"], ["p"]), N("Conv", ["p", "w"], ["y"], pads=[1, 0, 1, 0])],
        {"x": [1, 3, 8, 8]},
        {"pads": np.array([0, 0, 2, 1, 0, 0, 2, 1], np.int64), "w": f32(4, 3, 3, 3)},
    )
    assert ops(assert_equivalent(resize_pad.PadIntoConv(), pad)) == ["Conv"]


def test_rank_forms() -> None:
    add = model(
        [N("Add", ["x", "r"], ["a"]), N("Add", ["a", "b"], ["y"])],
        {"x": [1, 7, 16], "r": [1, 7, 16]},
        {"b": f32(16)},
    )
    new = assert_equivalent(layout.ElementwiseTo4D(), add, expect=2)
    assert ops(new).count("Add") == 2
    t3 = model([N("Transpose", ["x"], ["y"], perm=[0, 2, 1])], {"x": [1, 7, 16]})
    assert_equivalent(layout.TransposeTo4D(), t3)
    t5 = model([N("Transpose", ["x"], ["y"], perm=[2, 0, 3, 1, 4])], {"x": [1, 7, 3, 2, 8]})
    new5 = assert_equivalent(layout.TransposeTo4D(), t5)
    perm = [list(a.ints) for n in new5.graph.node for a in n.attribute if n.op_type == "Transpose"]
    assert len(perm[0]) == 4
    sq = model(
        [N("Squeeze", ["x", "ax"], ["s"]), N("Unsqueeze", ["s", "ax"], ["y"])],
        {"x": [1, 7, 16]},
        {"ax": np.array([0], np.int64)},
    )
    assert ops(assert_equivalent(layout.ShapeOpsToReshape(), sq, expect=2)) == ["Reshape", "Reshape"]


def _exported_layernorm(opset: int) -> onnx.ModelProto:
    c = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32), "g": f32(16), "b": f32(16)}
    nodes = [
        N("ReduceMean", ["x"], ["mu"], axes=[-1]),
        N("Sub", ["x", "mu"], ["d"]),
        N("Pow", ["d", "two"], ["p"]),
        N("ReduceMean", ["p"], ["v"], axes=[-1]),
        N("Add", ["v", "eps"], ["ve"]),
        N("Sqrt", ["ve"], ["s"]),
        N("Div", ["d", "s"], ["n"]),
        N("Mul", ["n", "g"], ["ng"]),
        N("Add", ["ng", "b"], ["y"]),
    ]
    return model(nodes, {"x": [1, 7, 16]}, c, opset=opset)


def test_layernorm_recompose_and_decompose() -> None:
    ln = assert_equivalent(normalization.LayerNormRecompose(), _exported_layernorm(17))
    assert ops(ln) == ["LayerNormalization"]
    back = assert_equivalent(normalization.LayerNormDecompose(), ln)
    assert "LayerNormalization" not in ops(back) and "ReduceMean" in ops(back)


def test_explicit_pads_for_same_and_valid() -> None:
    """SAME_UPPER (odd pixel at the end), SAME_LOWER (at the beginning) and VALID at a stride that
    leaves a remainder: the explicit pads give the same outputs, and no auto_pad is left."""
    w = f32(4, 3, 3, 3)
    for mode, op, attrs in (
        ("SAME_UPPER", "Conv", {"strides": [2, 2]}),
        ("SAME_LOWER", "Conv", {"strides": [3, 2]}),
        ("VALID", "Conv", {"strides": [2, 3]}),
        ("SAME_UPPER", "MaxPool", {"kernel_shape": [2, 3], "strides": [2, 2]}),
        ("SAME_LOWER", "AveragePool", {"kernel_shape": [3, 2]}),
    ):
        inputs = ["x", "w"] if op == "Conv" else ["x"]
        m = model([N(op, inputs, ["y"], auto_pad=mode, **attrs)], {"x": [1, 3, 9, 11]}, {"w": w})
        new = assert_equivalent(convertible.ExplicitPads(), m)
        assert all(a.name != "auto_pad" for n in new.graph.node for a in n.attribute), (mode, op)


def test_static_shape_for_reshape_and_expand() -> None:
    """A Reshape read with allowzero=1, one whose shape is computed from Shape, one with -1, and an
    Expand to a computed shape: each gets its explicit static shape; a static Reshape without
    placeholders is left alone."""
    nodes = [
        N("Reshape", ["x", "s_allow"], ["a"], allowzero=1),
        N("Shape", ["x"], ["sx"]),
        N("Reshape", ["a", "sx"], ["b"]),
        N("Reshape", ["b", "s_minus"], ["c"]),
        N("Concat", ["two", "sx"], ["se"], axis=0),
        N("Expand", ["b", "se"], ["d"]),
        N("Reshape", ["d", "s_plain"], ["e"]),
    ]
    inits = {
        "s_allow": np.array([1, 6, 4], np.int64),
        "s_minus": np.array([1, -1, 4], np.int64),
        "two": np.array([2], np.int64),
        "s_plain": np.array([2, 24], np.int64),
    }
    m = model(nodes, {"x": [1, 2, 3, 4]}, inits, outputs=["c", "e"], opset=14)
    new = assert_equivalent(convertible.StaticShape(), m, expect=4)
    reshapes = [n for n in new.graph.node if n.op_type in ("Reshape", "Expand")]
    assert all(not n.attribute for n in reshapes)
    values = {t.name: numpy_helper.to_array(t).tolist() for t in new.graph.initializer}
    assert [values[n.input[1]] for n in reshapes] == [
        [1, 6, 4],
        [1, 2, 3, 4],
        [1, 6, 4],
        [2, 1, 2, 3, 4],
        [2, 24],
    ]


def test_a_global_pool_over_tokens_becomes_a_reduce_over_the_last_axis() -> None:
    """tf2onnx's LayerNorm mean (GlobalAveragePool of [1, tokens, features]) and a GlobalMaxPool of the
    same rank become ReduceMean / ReduceMax over the last axis with the same values, at opset 14 and 18;
    an image's GlobalAveragePool stays a pool."""
    for opset in (14, 18):
        nodes = [
            N("GlobalAveragePool", ["x"], ["mean"]),
            N("GlobalMaxPool", ["x"], ["peak"]),
            N("GlobalAveragePool", ["image"], ["pooled"]),
        ]
        m = model(
            nodes, {"x": [1, 5, 16], "image": [1, 3, 4, 4]}, outputs=["mean", "peak", "pooled"], opset=opset
        )
        new = assert_equivalent(convertible.GlobalPoolReduce(), m, expect=2)
        assert sorted(ops(new)) == ["GlobalAveragePool", "ReduceMax", "ReduceMean"], opset


def test_a_reshape_or_expand_to_the_shape_it_has_is_read_through() -> None:
    """jax2tf's BroadcastTo of a LayerNorm statistic to its own shape, and a Reshape to the same shape,
    disappear; a real broadcast and a same-shape Expand that is a graph output stay."""
    nodes = [
        N("Expand", ["x", "same"], ["a"]),
        N("Reshape", ["a", "same"], ["b"]),
        N("Expand", ["b", "wider"], ["c"]),
        N("Expand", ["x", "same"], ["d"]),
    ]
    inits = {"same": np.array([1, 1, 8], np.int64), "wider": np.array([1, 4, 8], np.int64)}
    m = model(nodes, {"x": [1, 1, 8]}, inits, outputs=["c", "d"])
    new = assert_equivalent(convertible.SameShape(), m, expect=2)
    assert ops(new) == ["Expand", "Expand"]


def test_max_or_min_with_a_one_element_constant_is_a_clip() -> None:
    """Max(0.0, v) and Min(v, [6.0]) become Clip with that bound (inputs at opset 13, attributes at
    opset 10); a Max of two tensors and one with a per-element constant stay."""
    for opset in (10, 13):
        nodes = [
            N("Max", ["zero", "x"], ["a"]),
            N("Min", ["a", "six"], ["b"]),
            N("Max", ["b", "x"], ["c"]),
            N("Max", ["c", "row"], ["d"]),
        ]
        inits = {"zero": np.array(0.0, np.float32), "six": np.array([6.0], np.float32), "row": f32(8)}
        m = model(nodes, {"x": [1, 3, 8]}, inits, opset=opset)
        new = assert_equivalent(convertible.ClampByConstant(), m, expect=2)
        assert ops(new) == ["Clip", "Clip", "Max", "Max"], opset


def test_max_with_minus_infinity_or_min_with_infinity_is_the_tensor_itself() -> None:
    """jax2tf's Max(-inf, x) and a Min(x, [inf]) pass x through; a Max with a finite bound and one
    whose -inf broadcasts x to a larger shape stay."""
    nodes = [
        N("Max", ["minus_inf", "x"], ["a"]),
        N("Min", ["a", "plus_inf"], ["b"]),
        N("Max", ["b", "zero"], ["c"]),
        N("Max", ["row", "minus_inf"], ["e"]),
        N("Max", ["row", "minus_inf_3d"], ["f"]),
    ]
    inits = {
        "minus_inf": np.array(-np.inf, np.float32),
        "minus_inf_3d": np.full((1, 1, 1), -np.inf, np.float32),
        "plus_inf": np.array([np.inf], np.float32),
        "zero": np.array(0.0, np.float32),
    }
    m = model(nodes, {"x": [1, 3, 8], "row": [8]}, inits, outputs=["c", "e", "f"])
    new = assert_equivalent(convertible.UnboundedClamp(), m, expect=3)
    assert sorted(ops(new)) == ["Identity", "Identity", "Identity", "Max", "Max"]


def test_a_prelu_with_per_unit_slopes_runs_at_rank_4() -> None:
    """A Keras Dense + PReLU over [1, 16] (slope [16]) and a PReLU over [1, 4, 6] (slope [4, 1]) give
    the same values at rank 4 between two Reshapes; an image PReLU and one with a single slope stay."""
    nodes = [
        N("PRelu", ["units", "s16"], ["a"]),
        N("PRelu", ["seq", "s4"], ["b"]),
        N("PRelu", ["image", "s4x"], ["c"]),
        N("PRelu", ["units", "same"], ["d"]),
    ]
    inits = {
        "s16": f32(16),
        "s4": f32(4, 1),
        "s4x": f32(1, 4, 1, 1),
        "same": np.full(16, 0.25, np.float32),
    }
    inputs = {"units": [1, 16], "seq": [1, 4, 6], "image": [1, 4, 3, 3]}
    m = model(nodes, inputs, inits, outputs=["a", "b", "c", "d"])
    new = assert_equivalent(convertible.PReluRank4(), m, expect=2)
    assert ops(new).count("PRelu") == 4 and ops(new).count("Reshape") == 4


def test_a_reflect_pad_off_the_trailing_axes_is_padded_on_them() -> None:
    """A reflect Pad of the time axis of [1, 12, 3] (TF's reflection_pad1d, channels last) and of the
    samples of a [1, 16] signal (a PyTorch STFT) are padded on trailing axes between a Transpose and a
    Reshape, to the same values; a reflect Pad of the last two axes of a rank-4 tensor and a constant
    Pad stay as they are."""
    nodes = [
        N("Pad", ["seq", "p_time"], ["a"], mode="reflect"),
        N("Pad", ["signal", "p_samples"], ["b"], mode="reflect"),
        N("Pad", ["image", "p_image"], ["c"], mode="reflect"),
        N("Pad", ["seq", "p_time"], ["d"]),
    ]
    inits = {
        "p_time": np.array([0, 2, 0, 0, 3, 0], np.int64),
        "p_samples": np.array([0, 4, 0, 4], np.int64),
        "p_image": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
    }
    inputs = {"seq": [1, 12, 3], "signal": [1, 16], "image": [1, 2, 5, 5]}
    m = model(nodes, inputs, inits, outputs=["a", "b", "c", "d"])
    new = assert_equivalent(convertible.ReflectPadTrailing(), m, expect=2)
    reflect = [
        n for n in new.graph.node if n.op_type == "Pad" and n.attribute and n.attribute[0].s == b"reflect"
    ]
    assert len(reflect) == 3 and ops(new).count("Transpose") == 2 and ops(new).count("Reshape") == 4


def _erf_gelu(
    x: str, y: str, scalar_shape: tuple[int, ...], mul_form: bool = False
) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """0.5 * x * (1 + erf(x / sqrt 2)) as Paddle2ONNX writes it (0-d constants) or as a Mul by 1/sqrt 2."""
    c = {
        f"{y}_s": np.full(scalar_shape, 1 / math.sqrt(2) if mul_form else math.sqrt(2), np.float32),
        f"{y}_one": np.full(scalar_shape, 1.0, np.float32),
        f"{y}_half": np.full(scalar_shape, 0.5, np.float32),
    }
    nodes = [
        N("Mul" if mul_form else "Div", [x, f"{y}_s"], [f"{y}_d"]),
        N("Erf", [f"{y}_d"], [f"{y}_e"]),
        N("Add", [f"{y}_e", f"{y}_one"], [f"{y}_a"]),
        N("Mul", [x, f"{y}_a"], [f"{y}_m"]),
        N("Mul", [f"{y}_m", f"{y}_half"], [y]),
    ]
    return nodes, c


def test_an_erf_gelu_is_spelled_the_way_onnx2tf_maps_to_gelu() -> None:
    """Paddle's GELU with 0-d constants and one scaled by a Mul become Div(x, [sqrt 2]) -> Erf ->
    Add([1]) -> Mul(x, .) -> Mul([0.5]) with the same values; a GELU already spelled so is left, and
    the rewritten model matches nothing more."""
    a_nodes, a_c = _erf_gelu("x", "a", ())
    b_nodes, b_c = _erf_gelu("a", "b", (), mul_form=True)
    c_nodes, c_c = _erf_gelu("b", "c", (1,))
    m = model([*a_nodes, *b_nodes, *c_nodes], {"x": [1, 6, 8]}, {**a_c, **b_c, **c_c})
    new = assert_equivalent(convertible.GeluAsConverted(), m, expect=2)
    assert rewritten(convertible.GeluAsConverted(), new)[1] == 0
    divs = [n for n in new.graph.node if n.op_type == "Div"]
    values = {t.name: numpy_helper.to_array(t) for t in new.graph.initializer}
    assert len(divs) == 3 and all(values[d.input[1]].shape == (1,) for d in divs)


def test_a_split_at_opset_18_becomes_slices() -> None:
    """Split by num_outputs and by sizes at opset 18 give the same tensors as Slices; at opset 17 a
    Split stays (onnx2torch has its earlier forms)."""
    nodes = [
        N("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
        N("Split", ["b", "sizes"], ["c", "d", "e"], axis=-1),
    ]
    inits = {"sizes": np.array([1, 3, 4], np.int64)}
    m = model(nodes, {"x": [1, 6, 8]}, inits, outputs=["a", "c", "d", "e"], opset=18)
    new = assert_equivalent(convertible.SplitAsSlices(), m, expect=2)
    assert ops(new) == ["Slice"] * 5
    older = model(
        [N("Split", ["x", "two"], ["a", "b"], axis=1)],
        {"x": [1, 6, 8]},
        {"two": np.array([3, 3], np.int64)},
        outputs=["a", "b"],
        opset=17,
    )
    assert rewritten(convertible.SplitAsSlices(), older)[1] == 0


def test_a_reversing_slice_becomes_a_gather_of_the_indices_it_picks() -> None:
    """PyTorch's `x.flip(0)` (Slice -1 to -INT64_MAX, step -1), a reversed stride-2 slice of the last
    axis and one with a negative axis give the same tensors as Gathers; a forward Slice stays."""
    big = np.iinfo(np.int64)
    inits = {
        "s0": np.array([-1], np.int64), "e0": np.array([-big.max], np.int64), "a0": np.array([0], np.int64),
        "m1": np.array([-1], np.int64), "s1": np.array([6], np.int64), "e1": np.array([0], np.int64),
        "a1": np.array([-1], np.int64), "k2": np.array([-2], np.int64),
        "f0": np.array([1], np.int64), "f1": np.array([5], np.int64), "one": np.array([1], np.int64),
    }  # fmt: skip
    nodes = [
        N("Slice", ["x", "s0", "e0", "a0", "m1"], ["a"]),
        N("Slice", ["x", "s1", "e1", "a1", "k2"], ["b"]),
        N("Slice", ["x", "f0", "f1", "a0", "one"], ["c"]),
    ]
    m = model(nodes, {"x": [6, 2, 8]}, inits, outputs=["a", "b", "c"])
    new = assert_equivalent(convertible.ReversedSlice(), m, expect=2)
    assert sorted(ops(new)) == ["Gather", "Gather", "Slice"]
    values = {t.name: numpy_helper.to_array(t) for t in new.graph.initializer}
    gathers = [n for n in new.graph.node if n.op_type == "Gather"]
    assert [values[g.input[1]].tolist() for g in gathers] == [[5, 4, 3, 2, 1, 0], [6, 4, 2]]


def test_a_clip_s_absent_bounds_are_no_empty_names() -> None:
    """PyTorch's clamp(min=1) is Clip(x, min, ""): the empty name dropped; Clip(x, "", max) gets the
    lowest finite float as its min. Same values."""
    inits = {"lo": np.array(1.0, np.float32), "hi": np.array(0.5, np.float32)}
    nodes = [N("Clip", ["x", "lo", ""], ["a"]), N("Clip", ["x", "", "hi"], ["b"])]
    m = model(nodes, {"x": [2, 3]}, inits, outputs=["a", "b"])
    new = assert_equivalent(convertible.ClipBounds(), m, expect=2)
    assert list(new.graph.node[0].input) == ["x", "lo"]
    low = {t.name: numpy_helper.to_array(t) for t in new.graph.initializer}[new.graph.node[1].input[1]]
    assert low == np.finfo(np.float32).min and new.graph.node[1].input[2] == "hi"


def _squeeze_node(
    opset: int, inits: dict[str, np.ndarray], op: str, data: str, out: str, axis: int
) -> onnx.NodeProto:
    """A Squeeze or Unsqueeze of one axis: an attribute before opset 13, a constant input from it."""
    if opset < 13:
        return N(op, [data], [out], axes=[axis])
    inits[f"axis{axis}"] = np.array([axis], np.int64)
    return N(op, [data, f"axis{axis}"], [out])


def test_a_signal_unsqueezed_for_a_2d_convolution_and_squeezed_back_is_reshaped() -> None:
    """An EEG net's `[1, 6, T]` unsqueezed to an image for a 2-D convolution, and the convolution's
    output squeezed back after its ReLU, become Reshapes to the same shapes, at opset 13 (axes as an
    input) and 11 (axes as an attribute); a Squeeze and an Unsqueeze no convolution reads or writes
    stay (onnx2tf converts those)."""
    for opset in (11, 13):
        inits = {"w": f32(4, 1, 6, 3)}
        squeeze = partial(_squeeze_node, opset, inits)
        nodes = [
            squeeze("Unsqueeze", "x", "image", 1),
            N("Conv", ["image", "w"], ["feature"]),
            N("Relu", ["feature"], ["active"]),
            squeeze("Squeeze", "active", "series", 2),
            squeeze("Unsqueeze", "series", "again", 3),
            N("Sigmoid", ["again"], ["gate"]),
            squeeze("Squeeze", "gate", "out", 3),
        ]
        m = model(nodes, {"x": [1, 6, 10]}, inits, outputs=["out"], opset=opset)
        new = assert_equivalent(convertible.SqueezeAsReshape(), m, expect=2)
        assert sorted(ops(new)) == ["Conv", "Relu", "Reshape", "Reshape", "Sigmoid", "Squeeze", "Unsqueeze"]
