"""Bias correction (backends.passes.quant.bias_correction) on the real digits example: each Gemm's measured shift
is the one computed here in numpy from the QDQ model's own int8 weights, input scale and bias, fed the
float model's input to that layer; the stage folds it into the int32 bias and says so in its note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from quant_helpers import DIGITS_CALIB, digits_model, ptq_config, run_quantize, saved_with_calibration

from backends.catalog import target
from backends.passes import data
from backends.passes.quant import bias_correction
from backends.passes.quant.policy import resolve
from backends.passes.quant.qdq_build import Builder, prepare


def _build(tmp_path: Path) -> tuple[Path, Path, list[data.Sample]]:
    """The prepared float model, its uncorrected QDQ build and the samples."""
    prepared, builder, samples = _builder(tmp_path)
    return prepared, builder.build([]), samples


def _builder(tmp_path: Path) -> tuple[Path, Builder, list[data.Sample]]:
    """The prepared float model, a Builder of it on the cpu target's placement, and the samples."""
    from backends.passes.quant import calibration, qdq_placement
    from backends.passes.quant.qdq_build import op_types_to_quantize

    prepared, _ = prepare(digits_model(tmp_path / "m"), tmp_path, lambda _m: None)
    policy = resolve({"quantization": ptq_config(), "target": "cpu"}, target("cpu"))
    files = data.select_files(DIGITS_CALIB, 32)
    ops = op_types_to_quantize()
    calib = calibration.calibrate(prepared, files, calibration.Settings(), ops, tmp_path, None)
    model = onnx.load(str(prepared))
    placement = qdq_placement.plan(model, calib.ranges, target("cpu"), "target", ops, False)
    builder = Builder(
        prepared, calib.ranges, policy, tmp_path, placement.op_types, list(placement.float_nodes)
    )
    samples = [data.read_sample(p, data.model_inputs(model)) for p in files]
    return prepared, builder, samples


def _float_inputs(prepared: Path, tensor: str, samples: list[data.Sample]) -> np.ndarray:
    model = onnx.load(str(prepared))
    model.graph.output.append(helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run([tensor], s.feed)[0] for s in samples])


def _expected_gemm_shift(
    qdq: onnx.ModelProto, node: onnx.NodeProto, x: np.ndarray, wf: np.ndarray, bf: np.ndarray
) -> np.ndarray:
    """mean(float Gemm - int8 Gemm) per output, the int8 one from the QDQ model's own initializers."""
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    made = {t: n for n in qdq.graph.node for t in n.output}
    dq_x, dq_w, dq_b = (made[t] for t in node.input[:3])
    q_x = made[dq_x.input[0]]
    scale, zero = float(inits[q_x.input[1]]), int(inits[q_x.input[2]])
    info = np.iinfo(inits[q_x.input[2]].dtype)
    xq = (np.clip(np.rint(x / scale) + zero, info.min, info.max) - zero) * scale
    w_scale = inits[dq_w.input[1]].astype(np.float64)
    wq = inits[dq_w.input[0]].astype(np.float64) * w_scale.reshape(-1, *([1] * (wf.ndim - 1)))
    bq = inits[dq_b.input[0]].astype(np.float64) * inits[dq_b.input[1]].astype(np.float64)
    trans = next((a.i for a in node.attribute if a.name == "transB"), 0)
    w_float, w_int = (wf.T, wq.T) if trans else (wf, wq)
    return np.mean((x @ w_float + bf) - (xq @ w_int + bq), axis=0)


def test_each_gemm_shift_is_the_one_computed_from_its_int8_weights(tmp_path: Path) -> None:
    prepared, built, samples = _build(tmp_path)
    shifts = {s.node: s for s in bias_correction.measure(built, prepared, samples, tmp_path).shifts}
    qdq, float_model = onnx.load(str(built)), onnx.load(str(prepared))
    float_inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in float_model.graph.initializer}
    gemms = [n for n in float_model.graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 2 and {n.name for n in gemms} <= set(shifts), shifts.keys()
    assert any(n.op_type == "Conv" for n in float_model.graph.node if n.name in shifts)
    for float_node in gemms:
        node = next(n for n in qdq.graph.node if n.name == float_node.name)
        x = _float_inputs(prepared, float_node.input[0], samples).astype(np.float64)
        w, b = float_inits[float_node.input[1]], float_inits[float_node.input[2]]
        expected = _expected_gemm_shift(qdq, node, x, w, b)
        np.testing.assert_allclose(shifts[node.name].delta, expected, rtol=1e-3, atol=1e-5)
        assert np.abs(expected).max() > 0  # rounding the weights did move the mean: something to correct


def test_apply_adds_the_shift_in_bias_steps_and_skips_a_layer_kept_float(tmp_path: Path) -> None:
    prepared, built, samples = _build(tmp_path)
    shifts = bias_correction.measure(built, prepared, samples, tmp_path).shifts
    model = onnx.load(str(built))
    before = {t.name: numpy_helper.to_array(t).copy() for t in model.graph.initializer}
    assert bias_correction.apply(model, shifts) == len(shifts)
    after = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    made = {t: n for n in model.graph.node for t in n.output}
    for shift in shifts:
        node = next(n for n in model.graph.node if n.name == shift.node)
        scale = numpy_helper.to_array(
            next(t for t in model.graph.initializer if t.name == made[node.input[2]].input[1])
        )
        np.testing.assert_array_equal(after[shift.bias] - before[shift.bias], np.rint(shift.delta / scale))
    float_build = onnx.load(str(built))
    float_build.graph.node.remove(next(n for n in float_build.graph.node if n.name == shifts[0].node))
    assert bias_correction.apply(float_build, shifts) == len(shifts) - 1


def test_a_build_repeated_after_measuring_is_the_measured_build_corrected_not_a_second_quantization(
    tmp_path: Path,
) -> None:
    prepared, builder, samples = _builder(tmp_path)
    quantized: list[tuple[object, ...]] = []
    quantize = builder._quantize

    def counted(args: tuple[object, ...], target: Path) -> None:
        quantized.append(args)
        quantize(args, target)

    builder._quantize = counted  # type: ignore[method-assign]
    base = builder.build([])
    builder.shifts = bias_correction.measure(base, prepared, samples, tmp_path).shifts
    final = builder.build([])
    assert len(quantized) == 1 and builder.corrected == len(builder.shifts) > 0
    expected = onnx.load(str(base))  # the quantizer's output, as measured, with the shifts added
    bias_correction.apply(expected, builder.shifts)
    assert onnx.load(str(final)).SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    builder.build([], explicit_activations=True)  # other arguments: the quantizer runs again
    assert len(quantized) == 2


def test_the_stage_corrects_every_layer_and_says_so(tmp_path: Path) -> None:
    out = run_quantize(ptq_config(), digits_model(tmp_path / "m"), tmp_path / "w")
    record = out.report["bias_correction"]
    assert record["layers_measured"] == record["layers_corrected"] == 4, record
    assert record["samples"] == bias_correction.SAMPLES
    assert "bias corrected on 4 layers" in out.note
    off = run_quantize(ptq_config(bias_correction=False), digits_model(tmp_path / "m2"), tmp_path / "w2")
    assert "bias_correction" not in off.report and "bias corrected" not in off.note


def test_no_samples_measures_nothing(tmp_path: Path) -> None:
    prepared, built, _ = _build(tmp_path)
    assert bias_correction.measure(built, prepared, [], tmp_path, keep=4) == bias_correction.Measured(
        [], None
    )


def test_a_16_bit_build_of_an_older_opset_model_is_probed_in_the_opset_it_was_converted_to(
    tmp_path: Path,
) -> None:
    """A Conv then a ReduceMin with its axes as an attribute (opset 15, as tf2onnx writes basic-pitch's
    log-normalisation): with 16-bit activations ONNX Runtime's quantizer converts the model to opset
    21, where those axes are an input. The bias-correction probe copies the float model's nodes, so it
    converts them too (before, the probe was an invalid model and the stage failed)."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("ReduceMin", ["c"], ["low"], name="low", axes=[2, 3], keepdims=1),
            helper.make_node("Sub", ["c", "low"], ["y"], name="shift"),
        ],
        "reduce_attr",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        ],
    )
    model, calib = saved_with_calibration(graph, 15, tmp_path / "m", (1, 3, 8, 8))
    out = run_quantize(ptq_config(8, activations="uint16"), model, tmp_path / "q", calib=calib)
    built = onnx.load(str(out.artifacts["model"]))
    assert next(o.version for o in built.opset_import if o.domain in ("", "ai.onnx")) >= 21
    assert out.report["bias_correction"]["layers_measured"] >= 1, out.report["bias_correction"]


def test_the_probe_returns_the_float_models_outputs_on_the_first_samples(tmp_path: Path) -> None:
    prepared, built, samples = _build(tmp_path)
    measured = bias_correction.measure(built, prepared, samples, tmp_path, keep=5)
    assert measured.reference is not None and len(measured.reference.values) == 5
    session = ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"])
    assert measured.reference.names == [o.name for o in session.get_outputs()]
    for got, sample in zip(measured.reference.values, samples, strict=False):
        for g, e in zip(got, session.run(None, sample.feed), strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert bias_correction.measure(built, prepared, samples, tmp_path).reference is None


def test_the_check_scores_against_the_probes_float_outputs_without_running_the_float_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backends.passes import accuracy

    ran: list[Path] = []
    run_model = accuracy.run_model

    def counted(model: Path, *args: Any, **kwargs: Any) -> accuracy.ModelOutputs:
        ran.append(Path(model))
        return run_model(model, *args, **kwargs)

    monkeypatch.setattr(accuracy, "run_model", counted)
    model = digits_model(tmp_path / "m")
    # the engine stages the float model and the model to quantize at paths of their own
    staged = tmp_path / "in" / "float_model" / "model.onnx"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(model.read_bytes())
    extra = {"float_model": staged}
    shared = run_quantize(ptq_config(), model, tmp_path / "w", extra_inputs=extra).report["check"]
    assert not {model, staged} & set(ran), ran  # the float model ran only inside the probe
    ran.clear()
    alone = run_quantize(ptq_config(bias_correction=False), model, tmp_path / "w2", extra_inputs=extra)
    alone_check = alone.report["check"]
    assert ran.count(staged) == 1, ran  # without a probe the check runs it itself
    # the same float scores either way: the probe's outputs are the float model's
    assert shared["float"] == alone_check["float"] and shared["data"] == alone_check["data"]
    assert shared["ran"] and shared["passed"]
    ran.clear()  # a float reference that is another file than the model quantized is run by the check
    other = onnx.load(str(model))
    other.doc_string = "another float model"
    onnx.save(other, str(tmp_path / "other.onnx"))
    run_quantize(ptq_config(), model, tmp_path / "w3", extra_inputs={"float_model": tmp_path / "other.onnx"})
    assert ran.count(tmp_path / "other.onnx") == 1, ran
