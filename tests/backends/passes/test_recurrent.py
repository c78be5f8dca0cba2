"""LSTM weights after ptq: int8 on ONNX Runtime's CPU EP (com.microsoft DynamicQuantizeLSTM,
weight-only), otherwise kept fp32 and reported with their bytes. On ddddocr's real OCR recognizer
(CNN + bidirectional LSTM + CTC head), whose two LSTM weight tensors are 8.4 MB each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from backends.catalog import target
from backends.passes.quant import recurrent
from tests.backends.passes.quant_helpers import ptq_config, run_quantize
from tests.backends.tasks.task_models import ddddocr_model, text_line

WIDTH = 96


@pytest.fixture(scope="module")
def ocr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    folder = tmp_path_factory.mktemp("ocr")
    model = onnx.load(str(ddddocr_model("common.onnx")))
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = WIDTH
    path = folder / "ocr.onnx"
    onnx.save(model, str(path))
    inits = {t.name: t for t in model.graph.initializer}
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    lstm_bytes = sum(4 * int(np.prod(inits[name].dims)) for name in lstm.input[1:3])
    calib = folder / "calib"
    calib.mkdir()
    for i, text in enumerate(("AB12", "x7kq", "ZZ93", "hello", "p4m2", "q8r5")):
        x = text_line(text, 64, WIDTH).astype(np.float32) / 255.0
        np.save(calib / f"{i:02d}.npy", x[np.newaxis, np.newaxis])
    return path, calib, lstm_bytes


def test_lstm_weights_are_int8_on_the_cpu_target(ocr: tuple[Path, Path, int], tmp_path: Path) -> None:
    model, calib, lstm_bytes = ocr
    assert lstm_bytes > 16_000_000  # two 2 x 2048 x 512 fp32 tensors
    out = run_quantize(ptq_config(6), model, tmp_path / "w", calib)
    (row,) = out.report["recurrent"]
    assert row["weights"] == "int8" and row["float_bytes"] == lstm_bytes
    built = onnx.load(str(out.artifacts["model"]))
    ops = {(n.domain, n.op_type) for n in built.graph.node}
    assert ("com.microsoft", "DynamicQuantizeLSTM") in ops and ("", "LSTM") not in ops
    int8 = sum(int(np.prod(t.dims)) for t in built.graph.initializer if t.data_type == onnx.TensorProto.INT8)
    assert int8 >= lstm_bytes // 4  # the LSTM's W and R at one byte per weight
    assert "weights int8" in out.note and "LSTM" in out.note


def test_lstm_weights_another_runtime_cannot_run_int8_are_reported_with_their_bytes(
    ocr: tuple[Path, Path, int], tmp_path: Path
) -> None:
    model, _, lstm_bytes = ocr
    same, rows = recurrent.quantize_weights(model, tmp_path / "x.onnx", target("rk3588"), "int8", print)
    assert same == model
    assert rows[0]["weights"] == "fp32" and rows[0]["float_bytes"] == lstm_bytes
    assert f"kept fp32 ({lstm_bytes / 1e6:.1f} MB)" in recurrent.note(rows)


def test_lstm_weights_have_one_scale_per_gate_row_and_track_float_closer(
    ocr: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """Per tensor, the recognizer's LSTM alone (everything else float) lost 0.12 decoded-string
    agreement on 50 lines; per channel none: here its logits against float, per channel vs per tensor."""
    import onnxruntime as ort

    from backends.sdk.host import int8_dot

    model, calib, _ = ocr
    if int8_dot() == "saturating":
        # this host's int8 kernels clip u8 x s8 sums (DynamicQuantizeLSTM's too: per channel read 0.069
        # against per tensor's 0.035 here), so the cpu target's weights are uint8 and ORT's recurrent
        # quantizer, int8 only, leaves the LSTM float: reported with its bytes
        same, rows = recurrent.quantize_weights(model, tmp_path / "u8.onnx", target("cpu"), "uint8", None)
        assert same == model and rows[0]["weights"] == "fp32" and rows[0]["float_bytes"] > 16_000_000
        assert "int8 weights only" in rows[0]["reason"]
        return
    per_channel, rows = recurrent.quantize_weights(model, tmp_path / "pc.onnx", target("cpu"), "int8", None)
    assert rows[0]["weights"] == "int8" and "per channel" in rows[0]["reason"]
    per_tensor, _ = recurrent.quantize_weights(
        model, tmp_path / "pt.onnx", target("cpu"), "int8", None, per_channel=False
    )
    built = onnx.load(str(per_channel))
    lstm = next(n for n in built.graph.node if n.op_type == "DynamicQuantizeLSTM")
    scales = {t.name: list(t.dims) for t in built.graph.initializer}
    float_w = lstm.input[1].removesuffix("_quantized")
    w_shape = next(list(t.dims) for t in onnx.load(str(model)).graph.initializer if t.name == float_w)
    assert scales[lstm.input[8]] == w_shape[:2]  # W_scale: [directions, 4 x hidden], one per gate row

    def outputs(path: Path) -> list[np.ndarray]:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return [np.asarray(session.run(None, {name: np.load(f)})[0]) for f in sorted(calib.glob("*.npy"))]

    reference = outputs(model)

    def error(path: Path) -> float:
        return float(np.mean([np.mean(np.abs(a - b)) for a, b in zip(outputs(path), reference, strict=True)]))

    assert error(per_channel) < 0.5 * error(per_tensor), (error(per_channel), error(per_tensor))
