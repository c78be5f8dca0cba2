"""The quantize stage checks its artifact against the float model it came from before it is recorded
(backends.passes.quant.check): with no budget stated, on the first calibration samples against the
float model, with the generic measure the outputs imply (cosine for the digits logits); a model that
lost more than half of it fails the stage in one line naming both numbers. Expected numbers are
computed here with onnxruntime and numpy."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from quant_helpers import DIGITS_CALIB, digits_model, ptq_config, run_quantize

from backends.passes.quant import stage as Q
from backends.sdk.errors import TerminalError

SAMPLES = 16
FIRST = 8


def _calib(tmp_path: Path) -> Path:
    folder = tmp_path / "calib"
    folder.mkdir()
    for src in sorted(DIGITS_CALIB.glob("*.npy"))[:SAMPLES]:
        shutil.copyfile(src, folder / src.name)
    return folder


def _outputs(model: Path | bytes, folder: Path) -> list[np.ndarray]:
    options = ort.SessionOptions()  # a QDQ model's own math, not this host's fused int8 kernels
    options.add_session_config_entry("session.disable_quant_qdq", "1")  # (they clip without VNNI)
    session = ort.InferenceSession(model if isinstance(model, bytes) else str(model), options)
    name = session.get_inputs()[0].name
    feeds = [np.load(p).astype(np.float32).reshape(1, 1, 8, 8) for p in sorted(folder.glob("*.npy"))]
    return [session.run(None, {name: x})[0] for x in feeds]


def _mean_cosine(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    cos = [
        float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y)))
        for x, y in zip(a, b, strict=True)
    ]
    return sum(cos) / len(cos)


def test_a_sound_quantization_records_the_check_with_its_numbers(tmp_path: Path) -> None:
    """A drop within half the budget on the first FIRST samples passes on them alone."""
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    out = run_quantize(ptq_config(samples=SAMPLES), model, tmp_path / "w", calib=calib)
    check = out.report["check"]
    floats, ints = _outputs(model, calib), _outputs(tmp_path / "w" / "model.onnx", calib)
    expected = _mean_cosine(floats[:FIRST], ints[:FIRST])
    assert check["ran"] and check["passed"], check
    assert check["metric"].startswith("generic cosine"), check
    assert check["float"] == pytest.approx(1.0, abs=1e-6)
    assert check["quantized"] == pytest.approx(expected, abs=0.01)
    assert check["drop"] == pytest.approx(1.0 - expected, abs=0.01)
    assert (
        check["budget"] == 0.5
        and check["data"] == f"the first {FIRST} calibration samples against the float model"
    )


def test_a_drop_near_the_budget_is_decided_on_every_check_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget moved so the same sound build's drop on the first FIRST samples is above half of it:
    the check scores all SAMPLES, and its numbers are those of all of them."""
    from backends.passes.quant import check as C

    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    built = run_quantize(ptq_config(samples=SAMPLES), model, tmp_path / "w", calib=calib)
    floats, ints = _outputs(model, calib), _outputs(tmp_path / "w" / "model.onnx", calib)
    first, every = 1.0 - _mean_cosine(floats[:FIRST], ints[:FIRST]), 1.0 - _mean_cosine(floats, ints)
    budget = 1.9 * first
    assert built.report["check"]["drop"] > 0 and every <= budget, (first, every)  # the case is set up
    monkeypatch.setattr(C, "BROKEN_DROP", budget)
    check = run_quantize(ptq_config(samples=SAMPLES), model, tmp_path / "w2", calib=calib).report["check"]
    assert check["data"] == f"the first {SAMPLES} calibration samples against the float model", check
    assert check["drop"] == pytest.approx(every, abs=1e-4) and check["budget"] == budget, check


def _negated(path: Path) -> None:
    """Rewrites the model so its output is the negation of what it computed (a sabotaged quantizer)."""
    model = onnx.load(str(path))
    y = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [f"{y}_before" if o == y else o for o in node.output]
    model.graph.node.append(helper.make_node("Neg", [f"{y}_before"], [y], name="sabotage"))
    onnx.save(model, str(path))


def test_a_quantized_model_that_broke_fails_the_quantize_stage_naming_both_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quantizer's output is sabotaged in the stage's own process (its compact save negates the
    logits): cosine -1 against the float model, drop 2 > 0.5."""
    real = Q._save_compact

    def sabotaged(built: Path, prepared: onnx.ModelProto, out: Path) -> int:
        renamed = real(built, prepared, out)
        _negated(out)
        return renamed

    monkeypatch.setattr(Q, "_save_compact", sabotaged)
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    with pytest.raises(TerminalError) as caught:
        run_quantize(ptq_config(samples=SAMPLES), model, tmp_path / "w", calib=calib)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("quantize: the quantized model scores "), message
    found = re.search(r"scores (\S+) where its float source scores (\S+) \(generic cosine", message)
    assert found, message
    floats = _outputs(model, calib)
    expected = _mean_cosine(floats, [-y for y in floats])
    assert float(found[1]) == pytest.approx(expected, abs=0.01) and float(found[2]) == pytest.approx(1.0)
    drop = re.search(
        rf"on the first {SAMPLES} calibration samples against the float model\): drop (\S+) > 0.5,", message
    )
    assert drop and float(drop[1]) == pytest.approx(1.0 - expected, abs=0.01), message
    assert "the budget of a broken model (no budget stated); check the calibration data" in message
    assert "; log " in message


def test_an_auto_budget_the_search_cannot_meet_fails_the_quantize_stage(tmp_path: Path) -> None:
    """max_accuracy_drop 0 with one layer kept at most: int8 digits lose a little cosine on every
    sample, so the search ends with its budget NOT met; the stage fails in one line naming the final
    artifact's drop (computed here on the same 16 samples), the budget, the metric, the data and the
    knobs, instead of recording the artifact."""
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    auto = {"keep": "fp32", "auto": {"max_accuracy_drop": 0.0, "max_layers": 1}}
    config = ptq_config(samples=SAMPLES, activations="int8", sensitive_layers=auto)
    with pytest.raises(TerminalError) as caught:
        run_quantize(config, model, tmp_path / "w", calib=calib)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("quantize: the quantized model scores "), message
    assert f"(generic cosine on {SAMPLES} samples of quantization.calibration.data" in message
    expected = 1.0 - _mean_cosine(_outputs(model, calib), _outputs(tmp_path / "w" / "model.onnx", calib))
    found = re.search(
        r"\): drop (\S+) > 0, the budget of quantization\.sensitive_layers\.auto\.max_accuracy_drop;", message
    )
    assert found, message
    assert expected > 0 and float(found[1]) == pytest.approx(expected, rel=0.1, abs=1e-6), message
    assert "the search kept 1 of at most 1: raise quantization.sensitive_layers.auto.max_layers" in message
    assert "or max_accuracy_drop" in message and message.endswith(str(tmp_path / "w" / "quantize.log"))


def test_the_check_reads_the_outputs_the_way_the_declared_task_does(tmp_path: Path) -> None:
    """A declared task is how the stage's own check scores (top-1 agreement for a classifier), with no
    auto search: a model whose logits keep their cosine but change their class must not pass on it."""
    model, calib = digits_model(tmp_path / "m"), _calib(tmp_path)
    task = {"evaluate.task": {"type": "classification", "metric": "top1"}}
    out = run_quantize(ptq_config(samples=SAMPLES), model, tmp_path / "w", calib=calib, evaluate=task)
    check = out.report["check"]
    ref, got = _outputs(model, calib), _outputs(tmp_path / "w" / "model.onnx", calib)
    agreement = sum(int(np.argmax(a) == np.argmax(b)) for a, b in zip(ref, got, strict=True)) / len(ref)
    assert check["metric"].startswith("classification top1"), check
    assert check["quantized"] == pytest.approx(agreement, abs=1e-6) and check["float"] == 1.0
