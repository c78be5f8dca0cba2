"""The TFLite worker's own checks, in the managed tflite venv with TensorFlow's real converter: an
integer TFLite holding Select-TF (Flex) ops is a failed quantize that names them, a float TFLite's
loops are named before calibration, and onnx2tf converts the model `prepare` writes for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from backends.sdk import toolchains
from tests.backends.tflite.needs import NEEDS_TFLITE

pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

WORKER = Path(__file__).parents[3] / "backends" / "tflite" / "worker.py"

SCRIPT = """
import importlib.util, sys
import numpy as np
import tensorflow as tf

spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)

@tf.function(input_signature=[tf.TensorSpec([1, 4, 4], tf.float32)])
def f(x):
    return tf.linalg.det(tf.nn.relu(x) + tf.eye(4))  # MatrixDeterminant: no TFLite builtin

converter = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
converter.optimizations = [tf.lite.Optimize.DEFAULT]
converter.representative_dataset = lambda: ([np.random.rand(1, 4, 4).astype(np.float32)] for _ in range(4))
converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.SELECT_TF_OPS]
body = converter.convert()
print("FOUND", worker.flex_ops(body))
try:
    worker._no_flex(body, "full_int8")
except ValueError as exc:
    print("ERROR", exc)
"""


def _in_venv(script: str, tmp_path: Path, *args: str) -> str:
    """`script` run by the tflite venv's interpreter with the worker's path and `args`; its stdout."""
    python = toolchains.python(toolchains.TFLITE)
    assert python is not None
    done = subprocess.run(
        [str(python), "-I", "-c", script, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_flex_ops_in_an_int8_tflite_fail_naming_them(tmp_path: Path) -> None:
    stdout = _in_venv(SCRIPT, tmp_path)
    assert "FOUND {'FlexMatrixDeterminant': 1}" in stdout, stdout
    assert (
        "ERROR the full_int8 TFLite holds 1 Select-TF (Flex) ops, which integer kernels cannot run: "
        "FlexMatrixDeterminant x1"
    ) in stdout, stdout


UNSIGNED = """
import importlib.util, json, sys
from pathlib import Path
import numpy as np
import tensorflow as tf
import tf_keras

spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
out = Path(sys.argv[2])

x = tf_keras.Input((6, 6, 3), batch_size=1, name="image")
small = tf_keras.layers.Conv2D(2, 3, name="small")(x)
large = tf_keras.layers.Conv2D(2, 3, name="large")(x * 10.0)
model = tf_keras.Model(x, [small, large])
archive = tf_keras.export.ExportArchive()
archive.track(model)
archive.add_endpoint(name="serving_default", fn=lambda *i: model(i),
                     input_signature=[tf.TensorSpec([1, 6, 6, 3], tf.float32, "image")])
archive.write_out(str(out))

fn = tf.function(lambda t: model(t), input_signature=[tf.TensorSpec([1, 6, 6, 3], tf.float32)])
converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()])
path = out / "model_float32.tflite"
path.write_bytes(converter.convert())  # what onnx2tf writes when its Keras conversion raises
before = bool(tf.lite.Interpreter(model_path=str(path)).get_signature_list())
worker.signed_float(path, out)
feed = np.random.default_rng(0).random((1, 6, 6, 3), dtype=np.float32)
runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner()
got = runner(image=feed)
want = model(feed)
half = out / "model_float16.tflite"
half.write_bytes(converter.convert())  # onnx2tf's float16 file lacks the signature the same way
worker.signed_float(half, out, half=True)
halved = tf.lite.Interpreter(model_path=str(half)).get_signature_runner()(image=feed)
print("RESULT", json.dumps({
    "before": before,
    "keys": sorted(got),
    "tied": [bool(np.allclose(got[f"output_{k}"], want[k].numpy(), atol=1e-4)) for k in range(2)],
    "half": [bool(np.allclose(halved[f"output_{k}"], want[k].numpy(), atol=1e-2)) for k in range(2)],
}))
"""


def test_a_float_tflite_without_signature_is_keyed_from_the_saved_model(tmp_path: Path) -> None:
    """onnx2tf's float32 TFLite carries no serving signature where its Keras conversion raised (the
    PicoDet layout model's eight outputs): the worker writes it again from the SavedModel, so each
    output has the key its quantized variant is tied by, and that key's values are that output's."""
    import json

    stdout = _in_venv(UNSIGNED, tmp_path, str(tmp_path / "saved"))
    (line,) = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result == {
        "before": False,
        "keys": ["output_0", "output_1"],
        "tied": [True, True],
        "half": [True, True],
    }, result


LOOPS = """
import importlib.util, sys
from pathlib import Path
import tensorflow as tf

spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)

@tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
def f(x):
    _, y = tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h * 0.5 + x)), (0, x))
    return y

loop = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert()
plain = tf.lite.TFLiteConverter.from_concrete_functions(
    [tf.function(lambda x: tf.tanh(x), input_signature=[tf.TensorSpec([1, 4], tf.float32)]).get_concrete_function()]
).convert()
Path("loop.tflite").write_bytes(loop)
Path("plain.tflite").write_bytes(plain)
print("LOOP", worker.loop_ops(loop), repr(worker._loops_note(Path("loop.tflite"))))
print("PLAIN", worker.loop_ops(plain), repr(worker._loops_note(Path("plain.tflite"))))
"""


def test_a_float_tflite_running_a_loop_is_named_before_its_int8_calibration(tmp_path: Path) -> None:
    """onnx2tf writes a recurrent layer it gets whole as a WHILE loop, and TF's int8 calibrator has
    crashed on those (SIGSEGV): the step the worker announces before calibrating names the loops, so
    the crash's message says what the model holds; a model without control flow adds nothing."""
    stdout = _in_venv(LOOPS, tmp_path)
    assert "LOOP {'WHILE': 1} \" of a float model running control flow (WHILE x1: onnx2tf's" in stdout, stdout
    assert "PLAIN {} ''" in stdout, stdout


CONVERT = """
import json, sys
import numpy as np
import onnx2tf
from ai_edge_litert.interpreter import Interpreter

x = np.load("x.npy")
found = {}
for stem in ("raw", "prepared"):
    try:
        onnx2tf.convert(input_onnx_file_path=f"{stem}.onnx", output_folder_path=stem, non_verbose=True)
        runner = Interpreter(model_path=f"{stem}/{stem}_float32.tflite")
        runner.allocate_tensors()
        feed = runner.get_input_details()[0]
        runner.set_tensor(feed["index"], x if tuple(feed["shape"]) == x.shape else x.transpose(0, 2, 1))
        runner.invoke()
        found[stem] = runner.get_tensor(runner.get_output_details()[0]["index"]).tolist()
    except Exception as exc:
        found[stem] = type(exc).__name__
print("RESULT", json.dumps(found))
"""


@pytest.mark.parametrize("axis", [1, 3])
def test_a_signal_made_an_image_for_2d_convolutions_converts_through_onnx2tf(
    tmp_path: Path, axis: int
) -> None:
    """An EEG net's shape: `[1, 6, T]` unsqueezed to an image (axis 1: `[1, 1, 6, T]`, then a 2-D
    convolution and one over the whole height; axis 3, the 1-D-as-2-D idiom: `[1, 6, T, 1]` and a
    (3, 1) kernel), a ReLU and the Squeeze back. onnx2tf lays the rank-3 and rank-4 tensors out
    channels-last and maps those axes wrongly (both raise in its convolution); the model prepared for
    it (the converter form `squeeze_as_reshape`) converts to the float model's values."""
    import json

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from backends.tflite.prepare import prepare

    rng = np.random.default_rng(0)
    if axis == 1:
        convs = [
            helper.make_node("Conv", ["image", "w1"], ["a"], pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["a", "w2"], ["b"]),
        ]
        weights = {"w1": (4, 1, 3, 3), "w2": (8, 4, 6, 1)}
    else:
        convs = [helper.make_node("Conv", ["image", "w1"], ["b"], pads=[1, 0, 1, 0])]
        weights = {"w1": (8, 6, 3, 1)}
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in weights.items()
    ]
    inits.append(numpy_helper.from_array(np.array([axis], np.int64), "axis"))
    inits.append(numpy_helper.from_array(np.array([2 if axis == 1 else 3], np.int64), "back"))
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis"], ["image"]),
        *convs,
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Squeeze", ["c", "back"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "eeg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 40])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(tmp_path / "raw.onnx"))
    prepare(tmp_path / "raw.onnx", tmp_path / "prepared.onnx", lambda line: None)
    x = rng.standard_normal((1, 6, 40)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = ort.InferenceSession(str(tmp_path / "raw.onnx")).run(None, {"x": x})[0]

    stdout = _in_venv(CONVERT, tmp_path)
    (line,) = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    found = json.loads(line.removeprefix("RESULT "))
    got = np.asarray(found["prepared"], np.float32)
    assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-4, found["prepared"]
    raw = found["raw"]
    assert (
        isinstance(raw, str)
        or np.asarray(raw).shape != want.shape
        or np.abs(np.asarray(raw) - want).max() > 1e-3
    )
