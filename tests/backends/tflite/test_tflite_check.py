"""backends/tflite/check.py on outputs written here (no TFLite needed): what the worker would hand back
for each variant, scored against the real digits model on real samples. Float variants must compute the
same function; a quantized one is failed only past the broken-model bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from backends.passes.data import model_inputs, read_sample
from backends.sdk.errors import TerminalError
from backends.tflite.check import run_checks
from tests.conftest import DIGITS


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """digits at batch 1 (what the import stage hands on)."""
    import onnx

    proto = onnx.load(str(DIGITS / "model.onnx"))
    for value in (*proto.graph.input, *proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    path = tmp_path_factory.mktemp("digits") / "digits.onnx"
    onnx.save(proto, str(path))
    return path


def _samples(model: Path, count: int = 8) -> list[Any]:
    specs = model_inputs(model)
    return [read_sample(p, specs) for p in sorted((DIGITS / "data" / "calib").glob("*.npy"))[:count]]


def _float_logits(model: Path, samples: list[Any]) -> np.ndarray:
    session = ort.InferenceSession(str(model))
    return np.concatenate([session.run(None, s.feed)[0] for s in samples])


def _result(tmp_path: Path, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The worker's result shape: per variant its io ties and an npz of its outputs, stacked on a new
    first axis."""
    io = {"outputs": [{"onnx": "logits"}]}
    files = {}
    for name, logits in outputs.items():
        np.savez(tmp_path / f"{name}.npz", out0=logits[:, None].astype(np.float32))  # [count, 1, 10]
        files[name] = str(tmp_path / f"{name}.npz")
    return {"variants": {name: {"io": io} for name in outputs}, "check_outputs": files}


def test_faithful_outputs_pass_and_the_record_is_computed_from_them(tmp_path: Path, model: Path) -> None:
    samples = _samples(model)
    want = _float_logits(model, samples)
    noisy = want + np.random.default_rng(0).normal(0, 0.05, want.shape)  # int8-like error
    checks = run_checks(
        _result(tmp_path, {"float32": want, "full_int8": noisy}), model, samples, None, None, "8 samples"
    )
    assert checks["float32"]["cosine"] == pytest.approx(1.0) and checks["float32"]["max_abs_diff"] < 1e-5
    cosines = [
        float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(noisy, want, strict=True)
    ]
    assert checks["full_int8"]["cosine"] == pytest.approx(min(cosines), abs=1e-6)
    assert checks["full_int8"]["samples"] == 8 and checks["full_int8"]["passed"] is True


def test_a_float_conversion_that_changed_the_function_fails(tmp_path: Path, model: Path) -> None:
    samples = _samples(model)
    want = _float_logits(model, samples)
    shuffled = want[:, ::-1].copy()  # same values, wrong classes
    with pytest.raises(TerminalError, match="onnx2tf changed the model: float32 TFLite vs ONNX on 8 samples"):
        run_checks(_result(tmp_path, {"float32": shuffled}), model, samples, None, None, "8 samples")


def test_a_broken_int8_model_fails_past_the_bound_naming_both_scores(tmp_path: Path, model: Path) -> None:
    samples = _samples(model)
    want = _float_logits(model, samples)
    broken = np.random.default_rng(1).normal(0, 1, want.shape)  # unrelated to the float outputs
    labels = [int(np.argmax(row)) for row in want]  # the float model's own classes: it scores 1.0
    with pytest.raises(
        TerminalError, match=r"the full_int8 TFLite scores .* where its float source scores 1"
    ):
        run_checks(_result(tmp_path, {"full_int8": broken}), model, samples, labels, None, "8 samples")
