"""Preprocessing folded into real models: equal to NumPy preprocessing + the original model within 1e-4,
and the folded form adds no runtime op where folding is exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from npu_models import imported, photo, resize_hwc, write_imported

from backends.catalog import target
from backends.passes.preprocess import plan as PPlan
from backends.passes.preprocess import stage as PP
from backends.passes.rewrite.verify import run_model
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError

PPOCR = {"mean": [127.5] * 3, "std": [127.5] * 3}


def _compare(name: str, pre: dict[str, object], raw: np.ndarray, fold: bool = True) -> PP.Built:
    original = imported(name)
    built, plan, _ = PP.preprocess_model(original, pre, fold=fold)
    (want,) = run_model(original, {plan.input: PP.reference_input(plan, raw)})
    (got,) = run_model(built.model, {plan.input: raw})
    diff = float(np.max(np.abs(want - got)))
    assert diff <= 1e-4, f"{name}: {diff}"
    return built


def test_rec_uint8_bgr_nhwc_with_resize_on_a_real_text_image() -> None:
    text = photo("text")  # 172 x 448 gray-as-RGB scan of printed text
    bgr = np.ascontiguousarray(text[..., ::-1])
    pre = {
        "layout": "nhwc",
        "dtype": "uint8",
        "color": {"from": "bgr", "to": "rgb"},
        "resize": {"height": 48, "width": 320, "mode": "linear", "source_height": 172, "source_width": 448},
        **PPOCR,
    }
    built = _compare("rec", pre, bgr[None])
    assert built.added_ops == ["Cast", "Transpose", "Resize", "Sub"]  # std and color folded; mean kept (pads)
    assert built.folded == {"color": True, "std": True, "mean": False, "convs": ["p2o.Conv.0"]}


@pytest.mark.parametrize("fold", [True, False])
def test_cls_float_nchw_real_photo(fold: bool) -> None:
    image = resize_hwc(photo("coffee"), 48, 192).astype(np.float32)
    raw = np.ascontiguousarray(image.transpose(2, 0, 1)[None])
    pre = {
        "layout": "nchw",
        "dtype": "float32",
        "color": {"from": "rgb", "to": "bgr"},
        "mean": [120.0, 110.0, 100.0],
        "std": [60.0, 65.0, 70.0],
    }
    built = _compare("cls", pre, raw, fold=fold)
    assert ("Gather" in built.added_ops) is not fold


def test_folded_form_adds_no_runtime_op_when_exact() -> None:
    """squeezenet's first Conv pads nothing: swap, mean and std all fold; the node count is unchanged."""
    original = imported("light_squeezenet")
    raw = np.ascontiguousarray(
        resize_hwc(photo("chelsea"), 224, 224).astype(np.float32).transpose(2, 0, 1)[None]
    )
    pre = {
        "layout": "nchw",
        "dtype": "float32",
        "color": {"from": "bgr", "to": "rgb"},
        "mean": [123.7, 116.3, 103.5],
        "std": [58.4, 57.1, 57.4],
    }
    built = _compare("light_squeezenet", pre, raw)
    assert built.added_ops == []
    assert len(built.model.graph.node) == len(original.graph.node)
    assert built.folded["mean"] and built.folded["std"] and built.folded["color"]
    unfolded = _compare("light_squeezenet", pre, raw, fold=False)
    assert len(unfolded.model.graph.node) == len(original.graph.node) + 3


def test_gray_conversions() -> None:
    gray = np.ascontiguousarray(photo("camera")[None, :48, :192, :1])  # one channel of a real photo
    _compare(
        "cls", {"layout": "nhwc", "dtype": "uint8", "color": {"from": "gray", "to": "rgb"}, **PPOCR}, gray
    )
    _compare(
        "cls",
        {
            "layout": "nhwc",
            "dtype": "uint8",
            "color": {"from": "gray", "to": "rgb"},
            "mean": [120, 127, 130],
            "std": [60, 70, 80],
        },
        gray,
    )


def test_numpy_resize_matches_onnx_resize() -> None:
    from onnx import TensorProto, helper

    for mode in ("linear", "nearest", "cubic"):
        graph = helper.make_graph(
            [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 17, 23])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 1, 8, 40])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        x = photo("camera")[:17, :23, 0].astype(np.float32)[None, None]
        (y,) = run_model(model, {"x": x})
        ref = (
            PPlan.resize_matrix(17, 8, mode)
            @ x[0, 0].astype(np.float64)
            @ PPlan.resize_matrix(23, 40, mode).T
        )
        assert np.max(np.abs(y[0, 0] - ref)) < 1e-3, mode


def test_plan_rejects_mismatched_resize_and_channel_counts() -> None:
    model = imported("cls")
    with pytest.raises(TerminalError, match="resize"):
        PPlan.plan_for(model, {"resize": {"height": 32, "width": 100}})
    with pytest.raises(TerminalError, match="mean"):
        PPlan.plan_for(model, {"mean": [1.0, 2.0]})
    with pytest.raises(TerminalError, match="no input"):
        PPlan.plan_for(model, {"input": "nope"})


def test_preprocess_stage_is_deterministic_and_keeps_the_input_name(tmp_path: Path) -> None:
    model_path = write_imported("cls", tmp_path)
    pre = {
        "input": None,
        "layout": "nhwc",
        "dtype": "uint8",
        "color": {"from": "bgr", "to": "rgb"},
        "resize": None,
        **PPOCR,
    }
    blobs = []
    for run in ("a", "b"):
        work = tmp_path / run
        work.mkdir()
        out = PP.PreprocessPass().run(
            StageRequest(
                "preprocess",
                target("cpu"),
                {"preprocess": pre, "inputs": {}},
                {"model": model_path},
                work,
                work / "log",
            )
        )
        blobs.append(out.artifacts["model"].read_bytes())
        assert out.report["verified_max_abs_diff"] <= 1e-4
        assert out.report["input"]["name"] == "x" and out.report["input"]["shape"] == [1, 48, 192, 3]
        assert set(out.report["forms"]) == {"rknn", "cann_aipp", "coreml", "openvino"}
    assert blobs[0] == blobs[1]


def test_the_stage_note_names_what_was_folded_in_words() -> None:
    from backends.passes.preprocess.stage import _folded_text

    assert _folded_text({"color": True, "std": True, "mean": False, "convs": ["conv1"]}) == (
        "color, std folded into the weights of conv1"
    )
    assert (
        _folded_text({"color": False, "std": False, "mean": False, "convs": []})
        == "nothing folded into the weights"
    )
