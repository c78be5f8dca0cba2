"""RKNN's preprocess form and quantization plan, checked numerically and byte for byte (no toolkit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from rknn_helpers import Request, conv_model

from backends.passes.accuracy import run_model
from backends.passes.preprocess import forms as forms
from backends.rknn import build as B
from backends.rknn.preprocess import META_KEY, RknnPreprocess, read_meta, rknn_mean_std
from backends.rknn.stages import RknnQuantize, quant_plan
from backends.sdk import bundles
from backends.sdk.errors import TerminalError

SECTION = {
    "input": "x",
    "layout": "nhwc",
    "dtype": "uint8",
    "color": {"from": "rgb", "to": "bgr"},
    "mean": [10.0, 20.0, 30.0],
    "std": [2.0, 4.0, 8.0],
}


def _raw(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 16, 16, 3)).astype(np.uint8)


def _reference(model: Path, raw: np.ndarray) -> np.ndarray:
    """The spec's meaning: canonical preprocessing (backends.passes.preprocess.forms) then the model."""
    form = forms.canonical(SECTION, 3)
    x = forms.canonical_apply(form, raw[0])[np.newaxis].astype(np.float32)
    return run_model(model, [{"x": x}]).values[0][0]


@pytest.mark.parametrize("gather", [False, True], ids=["conv-weights", "gather"])
def test_rknn_form_matches_the_canonical_preprocessing(
    tmp_path: Path, make_request: Request, gather: bool
) -> None:
    source = conv_model(tmp_path / "m.onnx", gather_input=gather)
    out = RknnPreprocess().run(
        make_request("preprocess", {"preprocess": SECTION, "inputs": {}}, {"model": source})
    )
    meta = read_meta(out.artifacts["model"])
    assert meta is not None and meta["color_folded"] == ("gather" if gather else "conv-weights")
    # RKNN's arithmetic: (raw - mean_values) / std_values on the channels as fed, then the graph
    assert meta["mean_values"] == [30.0, 20.0, 10.0] and meta["std_values"] == [8.0, 4.0, 2.0]
    for seed in range(3):
        raw = _raw(seed)
        fed = B.normalized(raw, "x", meta)
        got = run_model(out.artifacts["model"], [{"x": fed}]).values[0][0]
        np.testing.assert_allclose(got, _reference(source, raw), rtol=1e-4, atol=1e-4)


def test_rknn_mean_std_uses_the_shared_conversion() -> None:
    mean, std = rknn_mean_std({"mean": [1, 2, 3], "std": [4, 5, 6], "color": {"from": "bgr", "to": "rgb"}}, 3)
    assert (mean, std) == ([3.0, 2.0, 1.0], [6.0, 5.0, 4.0])
    assert rknn_mean_std({"mean": [127.5], "std": [127.5]}, 3) == ([127.5] * 3, [127.5] * 3)


def test_resize_is_refused(tmp_path: Path, make_request: Request) -> None:
    section = {**SECTION, "resize": {"height": 16, "width": 16, "mode": "linear"}}
    with pytest.raises(TerminalError, match="resize"):
        RknnPreprocess().run(
            make_request(
                "preprocess",
                {"preprocess": section, "inputs": {}},
                {"model": conv_model(tmp_path / "m.onnx")},
            )
        )


def _policy(**quant: object) -> dict[str, object]:
    base: dict[str, object] = {
        "mode": "ptq",
        "weights": "int8",
        "activations": "int8",
        "per_channel": True,
        "calibration": {"data": "x", "samples": 4, "method": "minmax", "seed": 0},
    }
    base.update(quant)
    return {"quantization": base, "target": "rk3588"}


def test_quant_plan_maps_the_spec(tiny_model: Path) -> None:
    from backends.catalog import targets

    model = onnx.load(str(tiny_model))
    t = targets()["rk3588"]
    plan, _ = quant_plan(_policy(), t, model)
    assert plan["quantized_dtype"] == "w8a8" and plan["quantized_algorithm"] == "normal"
    # a classifier's tail (pooling, flatten) joins nothing: it is quantized like the rest
    assert plan["quantized_method"] == "channel" and "hybrid" not in plan and "tail_hybrid" not in plan
    plan, _notes = quant_plan(_policy(per_channel=False), t, model)
    assert plan["quantized_method"] == "layer"
    with pytest.raises(TerminalError, match="does not support uint8"):
        quant_plan(_policy(activations="uint8"), t, model)  # the catalog: RKNPU2 has no uint8 activations
    entropy = _policy(calibration={"data": "x", "samples": 4, "method": "entropy"})
    assert quant_plan(entropy, t, model)[0]["quantized_algorithm"] == "kl_divergence"
    with pytest.raises(TerminalError, match="percentile"):
        quant_plan(_policy(calibration={"data": "x", "samples": 4, "method": "percentile"}), t, model)
    assert quant_plan({"quantization": {"mode": "fp16"}, "target": "rk3588"}, t, model)[0] == {
        "quantize": False,
        "mode": "fp16",
    }
    hybrid = _policy(sensitive_layers={"keep": "fp16", "nodes": ["conv2"], "op_types": ["Relu"]})
    plan, _ = quant_plan(hybrid, t, model)
    assert plan["hybrid"] == {"custom_hybrid": [["c1", "r1"], ["r1", "c2"]], "dtype": "float16"}
    with pytest.raises(TerminalError, match="matches no node"):
        quant_plan(_policy(sensitive_layers={"nodes": ["nope*"]}), t, model)


def test_a_decode_tail_is_kept_float16_from_names_the_toolkit_keeps() -> None:
    """A YOLOv8-style tail: Conv -> Split into boxes and scores -> Sigmoid / scale -> Concat, with a
    value made from Shape arithmetic (the toolkit folds it to a constant and names none of it). The
    hybrid region runs from the Conv's output to the graph output; the shape nodes are not in it."""
    from onnx import TensorProto, helper, numpy_helper

    from backends.catalog import targets

    weight = numpy_helper.from_array(np.ones((6, 3, 1, 1), np.float32), "w")
    scale = numpy_helper.from_array(np.array(8.0, np.float32), "k")
    index = numpy_helper.from_array(np.array(2, np.int64), "i")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Split", ["c"], ["a", "b"], axis=1, num_outputs=2, name="split"),
        helper.make_node("Sigmoid", ["b"], ["s"], name="sig"),
        helper.make_node("Mul", ["a", "k"], ["m"], name="mul"),
        helper.make_node("Shape", ["c"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "i"], ["h"], name="gather"),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Add", ["m", "hf"], ["m2"], name="add"),
        helper.make_node("Concat", ["m2", "s"], ["y"], axis=1, name="concat"),
    ]
    graph = helper.make_graph(
        nodes,
        "tail",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4, 4])],
        [weight, scale, index],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    plan, notes = quant_plan(_policy(), targets()["rk3588"], model)
    assert plan["tail_hybrid"] == {
        "custom_hybrid": [["c", "y"]],
        "nodes": ["split", "sig", "mul", "add", "concat"],
    }
    assert "hybrid" not in plan and any("5 tail node(s)" in n for n in notes), notes
    auto = _policy(sensitive_layers={"keep": "fp16", "auto": {}})
    assert "tail_hybrid" not in quant_plan(auto, targets()["rk3588"], model)[0]  # auto_hybrid decides
    assert "tail_hybrid" not in quant_plan(_policy(placement="every_op"), targets()["rk3588"], model)[0]


def test_auto_is_recorded_as_what_rknn_does_and_chip_limits_are_refused(tiny_model: Path) -> None:
    from backends.catalog import targets

    model = onnx.load(str(tiny_model))
    t = targets()["rk3588"]
    auto = _policy(sensitive_layers={"keep": "fp16", "auto": {"max_accuracy_drop": 0.01, "max_layers": 3}})
    plan, notes = quant_plan(auto, t, model)
    assert plan["auto_hybrid"] and plan["auto_hybrid_cos_thresh"] == 0.98
    for said in ("auto_hybrid", "under 0.98", "max_accuracy_drop 0.01", "max_layers 3", "float16"):
        assert said in plan["auto_mapping"], plan["auto_mapping"]
    assert plan["auto_mapping"] in notes
    with pytest.raises(TerminalError, match=r"quantization\.activations: rknn w8a16 .* not rk3588"):
        quant_plan(_policy(activations="int16"), t, model)
    plan, _ = quant_plan(_policy(activations="int16"), targets()["rk3562"], model)
    assert plan["quantized_dtype"] == "w8a16"


def test_quantize_bundle_is_reproducible_and_in_rknn_layout(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    pre = RknnPreprocess().run(
        make_request(
            "preprocess", {"preprocess": SECTION, "inputs": {}}, {"model": conv_model(tmp_path / "m.onnx")}
        )
    )
    model = pre.artifacts["model"]
    config = _policy(calibration={"data": "calib", "samples": 4, "method": "minmax", "seed": 0})
    inputs = {"model": model, "float_model": model, "calibration_data": calib_folder}
    first = RknnQuantize().run(make_request("quantize", config, inputs)).artifacts["model"]
    second = RknnQuantize().run(make_request("quantize", config, inputs)).artifacts["model"]
    assert first.read_bytes() == second.read_bytes()
    names = bundles.names(first)
    assert names == sorted(
        ["model.onnx", "quant.json", "dataset.txt", *[f"calib/{i:05d}_0.npy" for i in range(4)]]
    )
    prep = B.prepare(first, tmp_path / "unpacked")
    lines = (prep.folder / "dataset.txt").read_text().split()
    arr = np.load(prep.folder / lines[0])
    assert arr.shape == (1, 3, 16, 16) and arr.dtype == np.float32, "RKNN reads NCHW, raw (not normalized)"
    assert arr.max() > 2.0
    assert prep.meta is not None and META_KEY
