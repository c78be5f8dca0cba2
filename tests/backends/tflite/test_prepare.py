"""Which inputs a model takes channels-last, read off its graph (what onnx2tf is told to keep)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.tflite.prepare import channels_last_inputs


def _model(first: list[onnx.NodeProto]) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [*first, helper.make_node("Conv", ["nchw", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 320, 240, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_nhwc_input_is_found_through_its_cast_and_transpose() -> None:
    """Keras exports (and the preprocess stage) read an NHWC frame through Transpose [0, 3, 1, 2]."""
    nhwc = _model(
        [
            helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Transpose", ["f"], ["nchw"], perm=[0, 3, 1, 2]),
        ]
    )
    assert channels_last_inputs(nhwc) == ["image"]
    other = _model(
        [
            helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Transpose", ["f"], ["nchw"], perm=[0, 3, 2, 1]),
        ]
    )
    assert channels_last_inputs(other) == []
