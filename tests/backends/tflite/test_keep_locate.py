"""backends/tflite/keep_locate.py in the managed tflite venv: a kept ONNX node is found in a TFLite by the
value it computes, through a fused successor when TFLite has no tensor of its own for it, and a node
nothing in the TFLite computes is an error naming it. The TFLite models are built here with TF itself
(one computes the ONNX model's function, one does not), so no onnx2tf run is needed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.sdk import toolchains
from backends.sdk.process import script_argv
from tests.backends.tflite.needs import NEEDS_TFLITE

pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

MODULE = Path(__file__).resolve().parents[3] / "backends" / "tflite" / "keep_locate.py"

SCRIPT = """\
import importlib.util, json, sys
import numpy as np
import tensorflow as tf

spec = importlib.util.spec_from_file_location("keep_locate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
w = np.load(sys.argv[3])


def tflite(fn):
    concrete = tf.function(fn, input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete.get_concrete_function()])
    return converter.convert()


bias = np.array([-1.0, 0.0, 0.0], np.float32)
same = tflite(lambda x: tf.nn.relu(tf.matmul(x, w) + bias) * 2.0)  # Gemm + Relu fuse into one op
other = tflite(lambda x: tf.tanh(x) + 1.0)
feed = {"x": np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)}
out = {"found": module.locate(sys.argv[2], same, ["gemm", "scale"], feed)}
try:
    module.locate(sys.argv[2], other, ["gemm"], feed)
except ValueError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def _model(path: Path, weight: np.ndarray) -> None:
    """x [1,4] -> Gemm (w, b) -> Relu -> Mul by 2 -> y: nodes gemm, relu, scale."""
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="gemm"),
        helper.make_node("Relu", ["g"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "two"], ["y"], name="scale"),
    ]
    inits = [
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([-1.0, 0.0, 0.0], np.float32), "b"),  # one output < 0: Relu acts
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the venv's onnxruntime reads
    onnx.save(model, str(path))


def test_kept_nodes_are_found_by_value_and_an_absent_one_is_an_error_naming_it(tmp_path: Path) -> None:
    weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
    np.save(tmp_path / "w.npy", weight)
    _model(tmp_path / "m.onnx", weight)
    (tmp_path / "probe.py").write_text(SCRIPT)
    python = str(toolchains.python(toolchains.TFLITE))
    files = (str(MODULE), str(tmp_path / "m.onnx"), str(tmp_path / "w.npy"))
    argv = script_argv(tmp_path / "probe.py", *files, interpreter=python)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    gemm, scale = out["found"]["gemm"], out["found"]["scale"]
    # the Gemm's own output (before Relu) exists in no TFLite op: it is found in the op that absorbed it
    assert gemm["op"] == "FULLY_CONNECTED" and gemm["via"] == ["gemm", "relu"], gemm
    assert scale["op"] == "MUL" and scale["via"] == ["scale"], scale
    assert "kept layer 'gemm' has no counterpart in the TFLite model" in out["error"], out
