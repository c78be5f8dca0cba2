"""The compile check's one comparison: per-channel relative errors, judged at their 99th percentile, the
single worst element reported beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends.passes.accuracy import ModelOutputs
from backends.sdk import artifact_check
from backends.sdk.errors import TerminalError


def _outputs(name: str, arrays: list[np.ndarray]) -> ModelOutputs:
    return ModelOutputs([name], [[a] for a in arrays])


def test_one_element_rounded_across_a_sigmoid_is_reported_not_failed(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = [rng.uniform(0, 1, (1, 1, 40, 60)).astype(np.float32) for _ in range(2)]
    artifact = [s + rng.normal(0, 0.004, s.shape).astype(np.float32) for s in source]
    artifact[1][0, 0, 7, 9] = source[1][0, 0, 7, 9] + 0.8
    found = artifact_check.agreement(_outputs("maps", source), _outputs("maps", artifact))
    scale = max(float(np.abs(np.stack(source)).max()), 1e-12)  # [1, 1, H, W]: one channel, the whole map
    assert found.worst == pytest.approx(0.8 / scale, rel=1e-3)
    assert (found.output, found.channel) == ("maps", 0)
    assert found.bulk < 0.05
    record = artifact_check.require(found, 0.25, "compile", "two samples", tmp_path / "log")
    assert record["agrees"] and record["worst_channel_error"] > 0.25 > record["bulk_channel_error"]


def test_a_score_collapse_fails_naming_both_numbers(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    table = rng.uniform(0, 1, (1, 6, 500)).astype(np.float32)  # [1, 4 boxes + 2 scores, N]
    table[0, :4] *= 320
    collapsed = table.copy()
    collapsed[0, 4:][collapsed[0, 4:] < 0.63] = 0.0  # every score under one uint8 step of 1.26 is gone
    found = artifact_check.agreement(_outputs("head", [table]), _outputs("head", [collapsed]))
    relative = np.abs(collapsed - table)[0, 4:] / table[0, 4:].max(axis=1, keepdims=True)
    assert found.worst == pytest.approx(float(relative.max()), rel=1e-6) and found.channel in (4, 5)
    with pytest.raises(TerminalError, match=r"99% quantile .*tolerance 0.25.*worst: channel [45]"):
        artifact_check.require(found, 0.25, "compile", "one sample", tmp_path / "log")


@pytest.mark.parametrize(
    ("shape", "axis"),
    [
        ([1, 1, 80, 80], None),  # a heatmap: one channel, not 80 rows
        ([1, 2, 80, 80], 1),
        ([1, 256, 2, 2], 1),  # NCHW whatever the sizes
        ([1, 84, 2100], 1),  # [1, 4+C, N]
        ([1, 2100, 85], 2),  # [1, N, 5+C]
        ([1, 1, 2100], None),
        ([1, 10], 1),
        ([7], None),
    ],
)
def test_the_channel_axis_is_the_tensors_own(shape: list[int], axis: int | None) -> None:
    assert artifact_check.channel_axis(shape) == axis


def _qdq_heatmap(path: Path, step: float) -> None:
    """y = DequantizeLinear(QuantizeLinear(x)) at uint8 step `step`: a heatmap head's Q/DQ tail."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["heatmap"]),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 80, 80])],
        [helper.make_tensor_value_info("heatmap", TensorProto.FLOAT, [1, 1, 80, 80])],
        [numpy_helper.from_array(np.float32(step), "s"), numpy_helper.from_array(np.uint8(0), "z")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_a_heatmap_one_int8_step_off_passes_and_a_lost_peak_fails(tmp_path: Path) -> None:
    """A [1, 1, 80, 80] heatmap whose rows are nearly all background: an integer build that rounds a
    tenth of its elements one uint8 step the other way agrees with its source (judged against the map's
    range, never against a near-empty row's), while a build that loses the peaks fails."""
    step = 1.0 / 255
    _qdq_heatmap(tmp_path / "head.onnx", step)
    assert artifact_check.output_steps(tmp_path / "head.onnx") == {"heatmap": pytest.approx(step)}
    rng = np.random.default_rng(3)
    levels = np.zeros((1, 1, 80, 80))
    levels[0, 0, 40:50, 10:20] = 255  # one face, 100 of 6400 elements
    levels[0, 0, rng.integers(0, 80, 600), rng.integers(0, 80, 600)] = 1  # background at one step
    source = (levels * step).astype(np.float32)
    rounded = source.copy()
    off = rng.random(source.shape) < 0.1
    rounded[off] = np.abs(source[off] - step * np.sign(rng.standard_normal(int(off.sum()))))
    steps = artifact_check.output_steps(tmp_path / "head.onnx")
    found = artifact_check.agreement(_outputs("heatmap", [source]), _outputs("heatmap", [rounded]), steps)
    assert found.channel == 0
    bulk = float(np.quantile(np.abs(rounded - source), 0.99)) / float(source.max())
    assert found.bulk == pytest.approx(bulk, rel=1e-6)
    assert artifact_check.require(
        found, artifact_check.QUANTIZED_TOLERANCE, "compile", "one map", tmp_path / "log"
    )["agrees"]
    lost = source.copy()
    lost[0, 0, 40:50, 10:20] = 0
    worse = artifact_check.agreement(_outputs("heatmap", [source]), _outputs("heatmap", [lost]), steps)
    with pytest.raises(TerminalError, match="output heatmap's elements differ by 1 of their channel's range"):
        artifact_check.require(
            worse, artifact_check.QUANTIZED_TOLERANCE, "compile", "one map", tmp_path / "log"
        )
