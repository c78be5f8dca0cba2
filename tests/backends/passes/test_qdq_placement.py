"""Quantizer placement by what the target executes, and the range-mixing check.

On a YOLOv8-style head (a real YOLOX with its decode built in ONNX, one output concatenating box
coordinates 0-320 and class scores 0-1), ONNX Runtime's every-op placement puts one uint8 scale on the
concat and loses every score under ~0.63; placement by target keeps the decode tail float."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.catalog import target
from backends.passes import accuracy, data
from backends.passes.quant import qdq_placement
from backends.tasks import Detection, resolve
from tests.backends.passes.quant_helpers import ptq_config, run_quantize
from tests.backends.passes.yolo_head import photo_samples, yolov8_at


def _toy(path: Path) -> Path:
    """x -> Conv -> Relu -> Conv -> (Sigmoid, Mul by 320) -> Concat -> Transpose: the tail is known by
    construction (everything after the second Conv), and the Concat joins 0-1 with 0-320."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    k = numpy_helper.from_array(np.array(320.0, np.float32), "k")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["s"], name="sig"),
        helper.make_node("Mul", ["s", "k"], ["box"], name="scale"),
        helper.make_node("Concat", ["box", "s"], ["cat"], name="cat", axis=1),
        helper.make_node("Transpose", ["cat"], ["y"], name="tr", perm=[0, 2, 3, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 4])],
        [w1, w2, k],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_tail_is_every_node_after_the_last_compute_op(tmp_path: Path) -> None:
    model = onnx.load(str(_toy(tmp_path / "toy.onnx")))
    assert qdq_placement.tail_nodes(model) == ["sig", "scale", "cat", "tr"]


def test_the_joining_concat_is_found_from_the_graph_alone(tmp_path: Path) -> None:
    """For converters that calibrate by themselves: the tail's data path (shape arithmetic left out)
    and the concat in it that joins two data tensors, without any calibrated range."""
    model = onnx.load(str(_toy(tmp_path / "toy.onnx")))
    shape = helper.make_node("Shape", ["c2"], ["shp"], name="shape")
    model.graph.node.insert(3, shape)  # a Shape of the last conv's output: not on the data path
    assert qdq_placement.data_tail(model) == ["sig", "scale", "cat", "tr"]
    assert qdq_placement.joining_concats(model) == ["cat"]
    assert "shp" not in qdq_placement.data_tensors(model) and "box" in qdq_placement.data_tensors(model)


def test_a_joining_concat_is_mixed_only_when_its_measured_ranges_are(tmp_path: Path) -> None:
    """For a converter that calibrates by itself, the joining concat's input ranges are measured on the
    float model: boxes scaled by 320 beside 0-1 scores are mixed; scaled by 2, they are not."""
    rng = np.random.default_rng(0)
    samples = [
        data.Sample(f"s{i}", {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}) for i in range(4)
    ]
    model = onnx.load(str(_toy(tmp_path / "toy.onnx")))
    (mixed,) = qdq_placement.mixed_joins(model, samples, "kept float")
    widths = dict(mixed.widths)
    assert (
        mixed.node == "cat"
        and mixed.ratio == pytest.approx(widths["box"] / widths["s"])
        and mixed.ratio > 100
    )
    for init in model.graph.initializer:
        if init.name == "k":
            init.CopyFrom(numpy_helper.from_array(np.array(2.0, np.float32), "k"))
    assert qdq_placement.mixed_joins(model, samples, "kept float") == []


def test_range_mixing_names_the_concat_from_calibrated_ranges(tmp_path: Path) -> None:
    model = onnx.load(str(_toy(tmp_path / "toy.onnx")))
    widths = {"box": 300.0, "s": 1.0, "r1": 5.0}
    found = qdq_placement.range_mixing(model, widths, "kept float")
    assert [(m.node, m.output, m.ratio) for m in found] == [("cat", "cat", 300.0)]
    assert qdq_placement.range_mixing(model, {"box": 10.0, "s": 1.0}, "kept float") == []


def _ranges(path: Path, widths: dict[str, float]) -> Path:
    """A calibration ranges file (ONNX Runtime's TensorsData) with each tensor's range [0, width]."""
    from onnxruntime.quantization.calibrate import (
        CalibrationMethod,
        TensorData,
        TensorsData,
        save_tensors_data,
    )

    data = {
        name: TensorData(lowest=np.array(0.0, np.float32), highest=np.array(w, np.float32))
        for name, w in widths.items()
    }
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), str(path))
    return path


def test_a_mixed_concat_is_float_16_bit_or_a_suggestion_by_what_the_target_runs(tmp_path: Path) -> None:
    """Where float layers run: the concat stays float. On an integer-only graph (QNN's HTP) with
    uint16 activations: its inputs and output at uint16. Without a 16-bit activation type the
    target lists: the fix is suggested, nothing widened."""
    model = onnx.load(str(_toy(tmp_path / "toy.onnx")))
    ranges = _ranges(tmp_path / "ranges.json", {"box": 320.0, "s": 1.0, "cat": 320.0, "r1": 5.0, "c2": 6.0})
    known = ["Conv", "Sigmoid", "Mul", "Concat", "Transpose"]
    host = qdq_placement.plan(model, ranges, target("cpu"), "target", known, False, "uint16")
    assert host.float_nodes["cat"] == "tail" and host.wide_tensors == []
    htp = target("qualcomm-htp-v75")
    assert "uint16" in htp.precisions
    integer = qdq_placement.plan(model, ranges, htp, "target", known, True, "uint16")
    assert integer.wide_tensors == ["box", "cat", "s"] and "cat" not in integer.float_nodes
    assert "quantized at uint16" in integer.mixed[0].fix and integer.report()["wide_tensors"] == [
        "box",
        "cat",
        "s",
    ]
    narrow = qdq_placement.plan(model, ranges, htp, "target", known, True, None)
    assert narrow.wide_tensors == [] and narrow.mixed[0].fix.startswith("suggested: split the concat")
    every = qdq_placement.plan(model, ranges, htp, "every_op", known, True, "uint16")
    assert every.wide_tensors == []


def test_integer_ops_follow_the_target_table() -> None:
    known = ["Conv", "Sigmoid", "Concat", "NotAnOp"]
    ops = qdq_placement.integer_ops(target("cpu"), known)
    assert "Conv" in ops and "NotAnOp" not in ops


def _box_f1(model: Path, quantized: Path, folder: Path) -> float:
    specs = data.model_inputs(model)
    samples = [data.read_sample(p, specs) for p in sorted(folder.glob("*.npy"))]
    reference = accuracy.run_model(model, samples, 2)
    return accuracy.score(
        accuracy.run_model(quantized, samples, 2), reference, None, resolve(Detection(), model)
    ).accuracy


@pytest.mark.slow
def test_placement_by_target_keeps_the_yolov8_decode_float_and_names_the_concat(tmp_path: Path) -> None:
    v8 = yolov8_at(tmp_path / "m")
    calib = photo_samples(tmp_path / "calib", 16, calibration=True)
    evaluation = photo_samples(
        tmp_path / "eval", 48, calibration=False
    )  # 16 read 0.79-0.82 where 48 read 0.93
    every = run_quantize(ptq_config(16, placement="every_op"), v8, tmp_path / "every", calib)
    placed = run_quantize(ptq_config(16), v8, tmp_path / "placed", calib)
    for out in (every, placed):
        mixed = out.report["placement"]["range_mixing"]
        assert len(mixed) == 1, mixed
        # the head's output Concat (ORT's pre-processing moves the final Transpose above it)
        concat = mixed[0]["node"]
        assert concat.startswith("Concat") and mixed[0]["output"] in ("h_cat", "boxes_scores")
        widths = sorted(i["range_width"] for i in mixed[0]["inputs"])
        assert widths[0] <= 1.0 and widths[-1] > 200  # class scores 0-1 against box coordinates 0-320
        assert f"range mixing: {concat} ({mixed[0]['output']})" in out.note
    assert "kept float" in placed.note and "suggested" in every.note
    assert placed.report["placement"]["float_nodes"][concat] == "tail"
    f1_every = _box_f1(v8, every.artifacts["model"], evaluation)
    f1_placed = _box_f1(v8, placed.artifacts["model"], evaluation)
    print(f"box F1 vs float: every_op {f1_every:.3f}, placement by target {f1_placed:.3f}")
    assert (
        f1_every < 0.75 and f1_placed >= 0.9 and f1_placed - f1_every >= 0.2
    )  # placement by target alone keeps box F1 >= 0.90


@pytest.mark.slow
def test_on_an_integer_target_with_16_bit_activations_the_mixed_concat_is_quantized_at_16_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QNN's HTP runs the whole graph in integer, so the decode cannot stay float; it runs uint16
    activations beside uint8 ones (A16W8), and a score in 0-1 beside coordinates in 0-320 keeps ~200
    levels at 16 bits where 8 bits keep one. The concat's inputs and output are built at uint16."""
    from backends.qnn.stages import QnnQuantize
    from backends.sdk.base import StageRequest

    v8 = yolov8_at(tmp_path / "m")
    calib = photo_samples(tmp_path / "calib", 16, calibration=True)
    evaluation = photo_samples(tmp_path / "eval", 48, calibration=False)
    quantization = {"mode": "ptq", "calibration": {"data": "calib", "samples": 16, "method": "minmax"}}

    def quantize(name: str) -> Any:
        work = tmp_path / name
        work.mkdir()
        request = StageRequest(
            "quantize",
            target("qualcomm-htp-v75"),
            {"quantization": quantization, "target": "qualcomm-htp-v75"},
            {"model": v8, "float_model": v8, "calibration_data": calib},
            work,
            work / "log",
        )
        return QnnQuantize().run(request)

    out = quantize("wide")
    placement = out.report["placement"]
    (mixed,) = placement["range_mixing"]
    assert "quantized at uint16" in mixed["fix"]
    wide = set(placement["wide_tensors"])
    assert {mixed["output"], *(i["tensor"] for i in mixed["inputs"])} == wide
    built = onnx.load(str(out.artifacts["model"]))
    zero_points = {t.name: t for t in built.graph.initializer}
    at_16 = {
        n.input[0]
        for n in built.graph.node
        if n.op_type == "QuantizeLinear"
        and len(n.input) > 2
        and zero_points[n.input[2]].data_type == TensorProto.UINT16
    }
    assert at_16 >= {i["tensor"] for i in mixed["inputs"]} and len(at_16) >= len(wide), (at_16, wide)
    (last,) = [n for n in built.graph.node if mixed["output"] in n.output]  # the output's own Q/DQ
    assert last.op_type == "DequantizeLinear" and zero_points[last.input[2]].data_type == TensorProto.UINT16
    real_plan = qdq_placement.plan
    monkeypatch.setattr(qdq_placement, "plan", lambda *a, **k: real_plan(*a[:6]))  # no 16-bit type given
    narrow = quantize("narrow")
    assert "wide_tensors" not in narrow.report["placement"]
    f1_wide = _box_f1(v8, out.artifacts["model"], evaluation)
    f1_narrow = _box_f1(v8, narrow.artifacts["model"], evaluation)
    print(f"box F1 vs float on an integer-only target: uint8 concat {f1_narrow:.3f}, uint16 {f1_wide:.3f}")
    assert f1_wide >= 0.85 and f1_wide - f1_narrow >= 0.2  # measured: 0.66 -> 0.93 (48 photos)
