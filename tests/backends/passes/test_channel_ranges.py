"""The per-channel range check names the activations a compute op reads in integer whose channels'
ranges are far apart, with the ratio computed here from the inputs the test feeds."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.passes.data import Sample
from backends.passes.quant import channel_ranges


def _model() -> onnx.ModelProto:
    """x [1,3,4,4] -> Conv a (reads x) -> Relu -> Conv b (reads y): x's channels are fed apart."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((3, 3, 1, 1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(np.eye(3, dtype=np.float32).reshape(3, 3, 1, 1), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="a"),
        helper.make_node("Relu", ["c"], ["y"], name="r"),
        helper.make_node("Conv", ["y", "w2"], ["z"], name="b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4])],
        [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _samples() -> list[Sample]:
    rng = np.random.default_rng(1)
    out = []
    for i in range(6):
        x = rng.uniform(0, 1, (1, 3, 4, 4)).astype(np.float32)
        x[0, 0] *= 100.0  # channel 0 spans ~0-100, channel 1 ~0-1, channel 2 ~0-2
        x[0, 2] *= 2.0
        out.append(Sample(str(i), {"x": x}))
    return out


def test_the_activation_with_channels_far_apart_is_named_with_its_ratio() -> None:
    model, samples = _model(), _samples()
    found = channel_ranges.check(model, samples, ["Conv"], {}, float_ok=True)
    assert [s.tensor for s in found] == ["x"], found
    xs = np.concatenate([s.feed["x"] for s in samples[: channel_ranges.SAMPLES]])
    widths = xs.max(axis=(0, 2, 3)) - np.minimum(xs.min(axis=(0, 2, 3)), 0)
    assert abs(found[0].ratio - widths.max() / widths.min()) < 1e-3 * found[0].ratio
    assert found[0].consumer == "a" and found[0].channels == 3
    assert "sensitive_layers" in found[0].fix
    text = channel_ranges.note([s.as_dict() for s in found])
    assert text.startswith("channel ranges: 1 activation with channels over 16x apart") and "x into a" in text


def test_a_consumer_left_float_or_not_quantized_is_not_checked() -> None:
    model, samples = _model(), _samples()
    assert channel_ranges.check(model, samples, ["Conv"], {"a": "tail"}, float_ok=True) == []
    assert channel_ranges.check(model, samples, ["MatMul"], {}, float_ok=True) == []
    integer = channel_ranges.check(model, samples, ["Conv"], {}, float_ok=False)
    assert "equalize" in integer[0].fix


def test_channels_of_float_dust_are_not_ranges() -> None:
    """A channel a Relu left at ~1e-12 is not a narrow range: x's ratio stays that of its live channels."""
    model, samples = _model(), _samples()
    for sample in samples:
        sample.feed["x"][0, 1] = 1e-12 * sample.feed["x"][0, 1]
    found = channel_ranges.check(model, samples, ["Conv"], {}, float_ok=True)
    xs = np.concatenate([s.feed["x"] for s in samples[: channel_ranges.SAMPLES]])
    widths = xs.max(axis=(0, 2, 3)) - np.minimum(xs.min(axis=(0, 2, 3)), 0)
    assert widths[1] < 1e-9
    assert abs(found[0].ratio - widths[0] / widths[2]) < 1e-3 * found[0].ratio
