"""The quantize check on every quantizer that writes an ONNX model (backends.passes.quant.check):
ONNX Runtime's fp16 conversion and NNCF's ptq are scored against their float source on the broken-model
bound (no budget of their own). A sound model records the check's numbers (computed here with
onnxruntime and numpy); a sabotaged one (its output negated after the quantizer ran) fails the stage in
one line naming both numbers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from quant_helpers import DIGITS_CALIB, digits_model, run_quantize

from backends.catalog import target
from backends.passes.quant import stage as Q
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError

FEW = 16
FIRST = 8


def _calib(tmp_path: Path) -> Path:
    folder = tmp_path / "calib"
    folder.mkdir()
    for src in sorted(DIGITS_CALIB.glob("*.npy"))[:FEW]:
        shutil.copyfile(src, folder / src.name)
    return folder


def _run(model: Path, feeds: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [np.asarray(session.run(None, {name: x})[0], dtype=np.float64) for x in feeds]


def _mean_cosine(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    cos = [
        float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y)))
        for x, y in zip(a, b, strict=True)
    ]
    return sum(cos) / len(cos)


def _random_feeds() -> list[np.ndarray]:
    """What the check scores on without calibration data: standard normal, one generator per index."""
    return [
        np.random.default_rng([0, i]).standard_normal((1, 1, 8, 8)).astype(np.float32) for i in range(FEW)
    ]


def _calib_feeds(folder: Path) -> list[np.ndarray]:
    return [np.load(p).astype(np.float32).reshape(1, 1, 8, 8) for p in sorted(folder.glob("*.npy"))]


def _negate(model: onnx.ModelProto) -> onnx.ModelProto:
    y = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [f"{y}_before" if o == y else o for o in node.output]
    model.graph.node.append(helper.make_node("Neg", [f"{y}_before"], [y], name="sabotage"))
    return model


def _negated_file(path: Path) -> None:
    onnx.save(_negate(onnx.load(str(path))), str(path))


def test_fp16_records_its_check_on_random_inputs(tmp_path: Path) -> None:
    model = digits_model(tmp_path / "m")
    out = run_quantize({"mode": "fp16"}, model, tmp_path / "w", calib=None)
    check = out.report["check"]
    feeds = _random_feeds()[:FIRST]  # a drop within half the budget on them decides
    expected = _mean_cosine(_run(model, feeds), _run(tmp_path / "w" / "model.onnx", feeds))
    assert check["ran"] and check["passed"], check
    assert check["metric"].startswith("generic cosine") and check["budget"] == 0.5, check
    assert check["data"] == f"{FIRST} random inputs (seed 0, no calibration data) against the float model"
    assert check["quantized"] == pytest.approx(expected, abs=1e-4) and expected > 0.999


def test_a_broken_fp16_model_fails_the_quantize_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Q.convert_fp16

    def sabotaged(source: Path, out: Path, *args: Any) -> dict[str, Any]:
        report = real(source, out, *args)
        _negated_file(out)
        return report

    monkeypatch.setattr(Q, "convert_fp16", sabotaged)
    model = digits_model(tmp_path / "m")
    with pytest.raises(TerminalError) as caught:
        run_quantize({"mode": "fp16"}, model, tmp_path / "w", calib=None)
    message = str(caught.value)
    floats = _run(model, _random_feeds())
    expected = _mean_cosine(floats, [-y for y in floats])
    found = re.search(
        r"^quantize: the quantized model scores (\S+) where its float source scores 1 ", message
    )
    assert "\n" not in message and found, message
    assert float(found[1]) == pytest.approx(expected, abs=1e-3), message
    assert (
        "random inputs (seed 0, no calibration data)" in message and "the budget of a broken model" in message
    )


def _nncf(tmp_path: Path, model: Path, calib: Path) -> Any:
    from backends.openvino.quantize import NncfQuantize

    section = {
        "mode": "ptq",
        "weights": "int8",
        "activations": "int8",
        "calibration": {"data": "calib", "samples": FEW, "method": "minmax", "seed": 0},
    }
    work = tmp_path / "w"
    work.mkdir()
    config = {"quantization": section, "target": "intel-npu"}
    inputs = {"model": model, "float_model": model, "calibration_data": calib}
    return NncfQuantize().run(
        StageRequest("quantize", target("intel-npu"), config, inputs, work, work / "log")
    )


@pytest.mark.slow
def test_nncf_quantize_records_its_check_on_the_calibration_samples(tmp_path: Path) -> None:
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    out = _nncf(tmp_path, model, calib)
    check = out.report["check"]
    feeds = _calib_feeds(calib)[:FIRST]  # a drop within half the budget on them decides
    expected = _mean_cosine(_run(model, feeds), _run(out.artifacts["model"], feeds))
    assert check["ran"] and check["passed"] and check["budget"] == 0.5, check
    assert check["data"] == f"the first {FIRST} calibration samples against the float model"
    assert check["quantized"] == pytest.approx(expected, abs=0.01), check
    assert json.loads(json.dumps(check)) == check  # recorded as is in the stage report


@pytest.mark.slow
def test_a_broken_nncf_model_fails_the_quantize_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nncf

    real = nncf.quantize
    monkeypatch.setattr(nncf, "quantize", lambda *a, **k: _negate(real(*a, **k)))
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    with pytest.raises(TerminalError) as caught:
        _nncf(tmp_path, model, calib)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("quantize: the quantized model scores -"), message
    assert f"on the first {FEW} calibration samples against the float model): drop " in message
    assert "> 0.5, the budget of a broken model" in message
