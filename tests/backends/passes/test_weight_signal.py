"""A weight's cheap signal is its op's output SQNR, computed here by hand; on ddddocr's real OCR
recognizer it ranks the first conv (3x3 taps that cancel) worst, where weight-domain SQNR ranks it
among the finest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.passes.data import Sample
from backends.passes.quant import points as quant_points
from backends.passes.quant import weight_signal


def _conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """Valid 2-D convolution, stride 1, written here (not the code under test's ONNX Runtime)."""
    n, _, h, wd = x.shape
    o, _in, kh, kw = w.shape
    y = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(h - kh + 1):
        for j in range(wd - kw + 1):
            patch = x[:, :, i : i + kh, j : j + kw].astype(np.float64)
            y[:, :, i, j] = np.tensordot(patch, w.astype(np.float64), axes=([1, 2, 3], [1, 2, 3]))
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def _round(w: np.ndarray) -> np.ndarray:
    """Symmetric int8 per output channel, as the quantizer rounds weights."""
    scale = np.abs(w).reshape(w.shape[0], -1).max(1).reshape(-1, 1, 1, 1) / 127.0
    return np.clip(np.round(w / scale), -127, 127) * scale


CANCELLING = np.array([[6.3, -10.4, 6.2], [9.6, -20.7, 8.1], [4.4, -7.8, 4.3]], np.float32)
SMOOTH = np.abs(CANCELLING)


def _inputs(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    # a light, nearly flat background with a few dark strokes: what a text line looks like
    out = []
    for _ in range(count):
        x = np.full((1, 1, 12, 20), 0.8, np.float32) + rng.normal(0, 0.01, (1, 1, 12, 20)).astype(np.float32)
        x[0, 0, 3:9, rng.integers(2, 16)] = -0.9
        out.append(x)
    return out


def test_probe_is_the_output_sqnr_computed_by_hand() -> None:
    w = np.stack([CANCELLING, SMOOTH])[:, None]
    b = np.array([0.3, -0.2], np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3])
    xs = _inputs(4)
    for c in range(2):
        wc, bc = w[c : c + 1], b[c : c + 1]
        probe = weight_signal.Probe(node, wc, _round(wc), {"b": bc})
        for x in xs:
            probe.add(x)
        signal = sum(float(np.sum(_conv2d(x, wc, bc) ** 2)) for x in xs)
        noise = sum(float(np.sum(_conv2d(x, wc - _round(wc), None) ** 2)) for x in xs)
        expected = 10 * np.log10(signal / noise)
        assert abs(probe.sqnr_db() - expected) < 1e-3, (c, probe.sqnr_db(), expected)


def _model(path: Path) -> Path:
    w = np.stack([CANCELLING, SMOOTH])[:, None]
    w2 = np.random.default_rng(0).normal(0, 0.5, (2, 2, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=[3, 3], name="conv1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[1, 1], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 12, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 18])],
        [
            numpy_helper.from_array(w, "w1"),
            numpy_helper.from_array(np.array([0.3, -0.2], np.float32), "b1"),
            numpy_helper.from_array(w2, "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_signals_give_a_conv_weight_its_output_sqnr(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from backends.passes.quant.calibration import ChunkReader

    model = _model(tmp_path / "m.onnx")
    xs = _inputs(8)
    qdq_path = tmp_path / "q.onnx"
    quantize_static(
        str(model),
        str(qdq_path),
        ChunkReader([{"x": x} for x in xs]),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    qdq, prepared = onnx.load(str(qdq_path)), onnx.load(str(model))
    weights = {t.name: t for t in prepared.graph.initializer}
    found = [p for p in quant_points.points(qdq) if p.kind == "weight"]
    samples = [Sample(str(i), {"x": x}) for i, x in enumerate(xs)]
    by_name = {s.point.name: s.sqnr_db for s in quant_points.signals(qdq, prepared, weights, found, samples)}
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    w1 = numpy_helper.to_array(weights["w1"]).astype(np.float64)
    scale = inits["w1_scale"].astype(np.float64).reshape(-1, 1, 1, 1)
    rounded = inits["w1_quantized"].astype(np.float64) * scale  # the build's own int8 weight, dequantized
    b1 = numpy_helper.to_array(weights["b1"])
    signal = sum(float(np.sum(_conv2d(x, w1, b1) ** 2)) for x in xs)
    noise = sum(float(np.sum(_conv2d(x, w1 - rounded, None) ** 2)) for x in xs)
    assert abs(by_name["w1"] - 10 * np.log10(signal / noise)) < 1e-2, by_name


def test_the_ocr_recognizers_first_conv_ranks_worst_by_output_not_by_weight() -> None:
    from backends.passes.quant.points import float_values
    from tests.backends.tasks.task_models import ddddocr_model, text_line

    model = onnx.load(str(ddddocr_model("common.onnx")))
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 96
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    probes, weight_domain = {}, {}
    for node in convs:
        w = init[node.input[1]].astype(np.float64)
        rounded = _round(w)
        weight_domain[node.name] = 10 * np.log10(np.sum(w**2) / np.sum((w - rounded) ** 2))
        bias = {k: init[k] for k in node.input[2:] if k in init}
        probes[node.name] = weight_signal.Probe(node, w, rounded, bias)
    lines = []
    for text in ("AB12", "x7kq", "ZZ93", "p4m2"):
        x = (text_line(text, 64, 96).astype(np.float32) / 255.0 - 0.5) / 0.5
        lines.append(Sample(text, {model.graph.input[0].name: x[np.newaxis, np.newaxis]}))
    for values in float_values(model, sorted({n.input[0] for n in convs}), lines):
        for node in convs:
            probes[node.name].add(values[node.input[0]])
    by_output = sorted(probes, key=lambda name: probes[name].sqnr_db())
    by_weight = sorted(weight_domain, key=lambda name: weight_domain[name])
    first = convs[0].name
    assert by_output[0] == first, [(n, round(probes[n].sqnr_db(), 1)) for n in by_output[:4]]
    assert by_weight.index(first) >= len(convs) // 2  # weight-domain SQNR calls it one of the finest


def test_a_probe_onnx_runtime_refuses_keeps_no_signal_instead_of_raising() -> None:
    # a grouped conv whose group attribute does not divide the weight: ORT rejects the lone op
    w = np.ones((3, 1, 3, 3), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=2)
    probe = weight_signal.Probe(node, w, _round(w), {})
    for x in _inputs(2):
        probe.add(x)
    assert probe.failed and probe.signal == 0.0  # the caller falls back to weight-domain SQNR


def test_float16_constants_are_probed_in_float32() -> None:
    w = np.stack([CANCELLING, SMOOTH])[:, None]
    b = np.array([0.3, -0.2], np.float16)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3])
    probe = weight_signal.Probe(node, w, _round(w), {"b": b})
    xs = _inputs(2)
    for x in xs:
        probe.add(x)
    signal = sum(float(np.sum(_conv2d(x, w, b.astype(np.float32)) ** 2)) for x in xs)
    assert not probe.failed and abs(probe.signal - signal) / signal < 1e-4


def test_only_default_domain_linear_ops_are_readers() -> None:
    model = onnx.load_from_string(_model_bytes())
    model.graph.node[2].domain = "com.microsoft"  # conv2 as a contrib op: not probed
    found = weight_signal.readers(model, ["w1", "w2"])
    assert set(found) == {"w1"}


def _model_bytes() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return (_model(Path(d) / "m.onnx")).read_bytes()
