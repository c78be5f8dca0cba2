"""A one-Conv QDQ model whose int8 products overflow an int16 pair sum: 16 input channels of 1.0
(uint8 255 at scale 1/255) times weights of 1.0 (int8 127 at 1/127, or uint8 255 at 1/255). Its QDQ
math gives 16 everywhere; kernels that add u8 x s8 product pairs in int16 clip each pair at 32767
(2 x 255 x 127 = 64770) and give about half."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

CHANNELS = 16


def model(weights: str) -> bytes:
    if weights == "int8":
        wq, wz, ws = np.full((1, CHANNELS, 1, 1), 127, np.int8), np.zeros(1, np.int8), 1 / 127
    else:
        wq, wz, ws = np.full((1, CHANNELS, 1, 1), 255, np.uint8), np.zeros(1, np.uint8), 1 / 255
    inits = [
        numpy_helper.from_array(np.array(1 / 255, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.uint8), "xz"),
        numpy_helper.from_array(wq, "wq"),
        numpy_helper.from_array(np.array([ws], np.float32), "ws"),
        numpy_helper.from_array(wz, "wz"),
        numpy_helper.from_array(np.array(CHANNELS / 255, np.float32), "ys"),
        numpy_helper.from_array(np.array(0, np.uint8), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["c"]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int8_sums",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def ones() -> np.ndarray:
    return np.ones((1, CHANNELS, 4, 4), np.float32)


def qdq_math(weights: str) -> float:
    """The model's output by its definition, in integers: sum over channels of (255 - 0) * w_q, times
    the two scales, requantized to the output scale."""
    wq, ws = (127, 1 / 127) if weights == "int8" else (255, 1 / 255)
    acc = CHANNELS * 255 * wq
    real = acc * (1 / 255) * ws
    step = CHANNELS / 255
    return min(round(real / step), 255) * step
