"""A failed onnx2tf conversion names the ONNX node or op onnx2tf's own log says it stopped at."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.passes import data
from backends.sdk.errors import TerminalError
from backends.tflite import convert
from backends.tflite.check import write_samples
from tests.backends.tflite.needs import NEEDS_TFLITE

pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])


def _wrap_pad() -> onnx.ModelProto:
    """Relu -> Pad(mode=wrap): onnx2tf's Pad converter hands "wrap" to tf.pad, which refuses it."""
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 10, 10])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first_relu"),
        helper.make_node("Pad", ["r", "pads"], ["y"], mode="wrap", name="wrapping_pad"),
    ]
    graph = helper.make_graph(nodes, "g", [X], [y], [pads])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _cast_like() -> onnx.ModelProto:
    """Relu -> CastLike -> CastLike: onnx2tf has no converter for CastLike."""
    like = numpy_helper.from_array(np.zeros([1], np.float16), "like")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first_relu"),
        helper.make_node("CastLike", ["r", "like"], ["h"], name="to_half"),
        helper.make_node("CastLike", ["h", "x"], ["y"], name="to_float"),
    ]
    graph = helper.make_graph(nodes, "g", [X], [y], [like])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _failure(tmp_path: Path, model: onnx.ModelProto) -> str:
    onnx.checker.check_model(model, full_check=True)
    job = tmp_path / "job"
    job.mkdir()
    path = job / "model.onnx"
    onnx.save(model, str(path))
    inputs = data.model_inputs(path)
    write_samples(job / "check.npz", data.random_samples(inputs, 2), [spec.name for spec in inputs])
    request = {
        "model": str(path),
        "output": str(job / "out"),
        "calibration": {},
        "check": str(job / "check.npz"),
        "variant": "float32",
        "keep": [],
    }
    with pytest.raises(TerminalError) as caught:
        convert(request, job, tmp_path / "log.txt")
    return str(caught.value).splitlines()[0]


def test_a_layer_onnx2tf_fails_on_is_named_with_its_op(tmp_path: Path) -> None:
    first = _failure(tmp_path, _wrap_pad())
    assert first.startswith("onnx2tf stopped at Pad node 'wrapping_pad': ")
    assert "first_relu" not in first


def test_an_op_onnx2tf_cannot_convert_is_named_with_its_nodes(tmp_path: Path) -> None:
    first = _failure(tmp_path, _cast_like())
    assert first.startswith("onnx2tf stopped at op CastLike, which onnx2tf has no converter for")
    assert "'to_half', 'to_float'" in first and "first_relu" not in first
