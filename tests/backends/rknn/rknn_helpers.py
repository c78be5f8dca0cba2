"""Helpers shared by the RKNN tests (a tiny real CNN, the request type, the venv skip marker)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from backends.sdk import toolchains
from backends.sdk.base import StageRequest


def conv_model(path: Path, channels: int = 3, size: int = 16, gather_input: bool = False) -> Path:
    """Conv(3x3) -> Relu -> Conv -> GlobalAveragePool -> Flatten: a tiny real CNN with 8 classes.
    `gather_input` also feeds the input to an Add, so a channel swap cannot be folded into weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, channels, 3, 3)) * 0.3).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "B1"),
        numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "W2"),
        numpy_helper.from_array(np.zeros(8, np.float32), "B2"),
    ]
    first = "x"
    nodes = []
    if gather_input:
        inits.append(numpy_helper.from_array(np.ones((1, channels, 1, 1), np.float32), "one"))
        nodes.append(helper.make_node("Add", ["x", "one"], ["x1"], name="add_in"))
        first = "x1"
    nodes += [
        helper.make_node("Conv", [first, "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


Request = Callable[..., StageRequest]

needs_rknn = pytest.mark.skipif(
    toolchains.python(toolchains.RKNN) is None,
    reason="rknn venv missing: run `npuctl toolchain install rknn`",
)
