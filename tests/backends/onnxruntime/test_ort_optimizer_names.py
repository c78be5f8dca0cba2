"""Every ORT optimizer name a fusion switch disables is real: ORT silently ignores unknown names, so each
one is checked to change the optimized graph of the smallest graph that has its pattern."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.onnxruntime import FUSION_OPTIMIZERS
from backends.onnxruntime._compile import optimize

C = 16  # enough output channels for the NCHWc transformer to take the Conv


def _const(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name
    )


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], extra_inputs: tuple[str, ...] = ()
) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, C, 8, 8]) for n in extra_inputs]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv(out: str = "c") -> onnx.NodeProto:
    return helper.make_node("Conv", ["x", "w"], [out], pads=[1, 1, 1, 1])


W = _const("w", (C, 3, 3, 3))
CASES: dict[str, tuple[int, onnx.ModelProto]] = {
    "ConvBNFusion": (
        1,
        _model(
            [_conv(), helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])],
            [
                W,
                *(_const(n, (C,), i) for i, n in enumerate("sbm")),
                numpy_helper.from_array(np.ones(C, np.float32), "v"),
            ],
        ),
    ),
    "ConvAddFusion": (
        1,
        _model([_conv(), helper.make_node("Add", ["c", "k"], ["y"])], [W, _const("k", (1, C, 1, 1))]),
    ),
    "ConvMulFusion": (
        1,
        _model([_conv(), helper.make_node("Mul", ["c", "k"], ["y"])], [W, _const("k", (1, C, 1, 1))]),
    ),
    "ConvActivationFusion": (2, _model([_conv(), helper.make_node("Relu", ["c"], ["y"])], [W])),
    "ConvAddActivationFusion": (  # a level-3 (layout) transformer; NCHWc takes the Conv first when enabled
        3,
        _model(
            [
                helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),  # needs a bias input
                helper.make_node("Add", ["c", "z"], ["a"]),
                helper.make_node("Relu", ["a"], ["y"]),
            ],
            [W, _const("cb", (C,))],
            extra_inputs=("z",),
        ),
    ),
    "NchwcTransformer": (3, _model([_conv("y")], [W])),
    "MatMulAddFusion": (
        1,
        helper.make_model(
            helper.make_graph(
                [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                [_const("w", (4, 4)), _const("b", (4,))],
            ),
            opset_imports=[helper.make_opsetid("", 13)],
        ),
    ),
    "ConstantFolding": (
        1,
        _model(
            [helper.make_node("Add", ["k1", "k2"], ["k"]), helper.make_node("Add", ["x", "k"], ["y"])],
            [_const("k1", (1, 3, 1, 1)), _const("k2", (1, 3, 1, 1), 1)],
        ),
    ),
}


def _ops(tmp_path: Path, model: onnx.ModelProto, level: int, disabled: list[str], tag: str) -> Counter[str]:
    source, out = tmp_path / "in.onnx", tmp_path / f"{tag}.onnx"
    onnx.save(model, source)
    optimize(source, out, ["disable_all", "basic", "extended", "all"][level], disabled)
    return Counter(f"{n.domain}.{n.op_type}" for n in onnx.load(str(out)).graph.node)


def test_every_switch_name_has_a_case() -> None:
    assert {name for names in FUSION_OPTIMIZERS.values() for name in names} == set(CASES)


BASELINE = {"ConvAddActivationFusion": ["NchwcTransformer"]}
"""Optimizers disabled in both runs, so the one under test is the one that sees its pattern."""


@pytest.mark.parametrize("name", sorted(CASES))
def test_disabling_the_name_changes_the_optimized_graph(tmp_path: Path, name: str) -> None:
    level, model = CASES[name]
    base = BASELINE.get(name, [])
    assert _ops(tmp_path, model, level, base, "on") != _ops(tmp_path, model, level, [*base, name], "off")


def test_an_unknown_name_is_silently_ignored_by_ort(tmp_path: Path) -> None:
    """Why the test above exists."""
    level, model = CASES["ConvBNFusion"]
    assert _ops(tmp_path, model, level, [], "on") == _ops(tmp_path, model, level, ["ConvBnFusion"], "off")
