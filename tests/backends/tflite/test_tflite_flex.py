"""The TFLite worker's own checks, in the managed tflite venv with TensorFlow's real converter: an
integer TFLite holding Select-TF (Flex) ops is a failed quantize that names them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backends.sdk import toolchains

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        toolchains.python(toolchains.TFLITE) is None,
        reason="needs `npuctl toolchain install tflite` (.ci/setup)",
    ),
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


def test_flex_ops_in_an_int8_tflite_fail_naming_them(tmp_path: Path) -> None:
    python = toolchains.python(toolchains.TFLITE)
    assert python is not None
    done = subprocess.run(
        [str(python), "-I", "-c", SCRIPT, str(WORKER)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FOUND {'FlexMatrixDeterminant': 1}" in done.stdout, done.stdout
    assert (
        "ERROR the full_int8 TFLite holds 1 Select-TF (Flex) ops, which integer kernels cannot run: "
        "FlexMatrixDeterminant x1"
    ) in done.stdout, done.stdout
