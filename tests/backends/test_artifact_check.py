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


def _float_tail(path: Path, step: float) -> None:
    """A Q/DQ trunk ending in float ops after its last DequantizeLinear: moved (Transpose, Reshape),
    bounded (Sigmoid), joined (Concat) and computed (Exp)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["moved"]),
        helper.make_node("Sigmoid", ["d"], ["sig"]),
        helper.make_node("Transpose", ["sig"], ["probability"], perm=[0, 1, 3, 2]),
        helper.make_node("Concat", ["d", "sig"], ["joined"], axis=1),
        helper.make_node("Exp", ["d"], ["computed"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("moved", "probability", "joined", "computed")]  # fmt: skip
    inits = [
        numpy_helper.from_array(np.float32(step), "s"),
        numpy_helper.from_array(np.uint8(0), "z"),
        numpy_helper.from_array(np.array([1, 2, 16], np.int64), "shape"),
    ]
    graph = helper.make_graph(nodes, "tail", [x], outs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_an_outputs_step_is_traced_through_the_float_tail(tmp_path: Path) -> None:
    """Shape ops keep the nearest DequantizeLinear's step; a Sigmoid's output is judged on one int8
    step of its [0, 1] range (its near-empty map is never judged on its own 1e-6); arithmetic (Exp)
    gives no step: that output is judged as float."""
    _float_tail(tmp_path / "tail.onnx", 0.5)
    steps = artifact_check.output_steps(tmp_path / "tail.onnx")
    assert steps == {
        "moved": pytest.approx(0.5),
        "probability": pytest.approx(1 / 255),
        "joined": pytest.approx(0.5),
    }
    empty = np.zeros((1, 2, 4, 4))
    empty[0, :, 0, 0] = 1e-6
    one_step = empty + 1 / 255  # the artifact's sigmoid one int8 step above an empty map
    found = artifact_check.agreement(
        _outputs("probability", [empty]), _outputs("probability", [one_step]), steps
    )
    assert found.worst == pytest.approx((1 / 255) / (artifact_check.QUANTIZED_STEPS / 255), rel=1e-3)
    assert found.worst <= artifact_check.QUANTIZED_TOLERANCE


def _scaled_pair(folder: Path, step: float) -> tuple[Path, Path]:
    """A float model y = x * 1 and its Q/DQ source y = DQ(Q(x)) * 1 (the Mul after the last
    DequantizeLinear: the output has no step floor, so a near-empty channel is judged on its own range)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    one = numpy_helper.from_array(np.float32(1.0), "one")
    qdq = [numpy_helper.from_array(np.float32(step), "s"), numpy_helper.from_array(np.uint8(0), "z")]
    paths = folder / "float.onnx", folder / "int8.onnx"
    graphs = [
        helper.make_graph([helper.make_node("Mul", ["x", "one"], ["y"])], "f", [x], [y], [one]),
        helper.make_graph(
            [
                helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
                helper.make_node("Mul", ["d", "one"], ["y"]),
            ],
            "q",
            [x],
            [y],
            [one, *qdq],
        ),
    ]
    for path, graph in zip(paths, graphs, strict=True):
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return paths


def _channel_bulk(reference: np.ndarray, other: np.ndarray) -> float:
    """The BULK quantile of |other - reference| over each channel's max |reference|, for [samples, 1, C, H, W]."""
    scale = np.abs(reference).max(axis=(0, 1, 3, 4), keepdims=True)
    return float(np.quantile(np.abs(other - reference) / scale, artifact_check.BULK))


@pytest.mark.parametrize("offset", [-0.5, -0.1, 0.1])
def test_an_int8_build_is_judged_against_float_beside_the_cpu_int8_model(
    tmp_path: Path, offset: float
) -> None:
    """The decisive rule: a build whose elements differ from its Q/DQ source beyond the tolerance passes
    when it follows the float model as well as the Q/DQ source on ONNX Runtime's CPU kernels does (within
    FLOAT_MARGIN of its error), and fails naming both figures when it does not. The artifact here errs
    to the other side of each float value, `k` times as far as the CPU int8 model does (k = FLOAT_MARGIN +
    offset)."""
    from backends.passes.data import Sample

    k = artifact_check.FLOAT_MARGIN + offset
    step = 1 / 32
    float_model, source = _scaled_pair(tmp_path, step)
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, (2, 1, 2, 8, 8)).astype(np.float32)
    x[:, :, 1] *= 2.5 * step  # a near-empty channel: two or three steps its whole range
    samples = [Sample(f"s{i}", {"x": x[i]}) for i in range(2)]
    cpu = np.stack([np.round(v / step) * step for v in x]).astype(np.float64)
    artifact = x - k * (cpu - x)
    outputs = ModelOutputs(["y"], [[a.astype(np.float32)] for a in artifact])
    how = artifact_check.Check(
        artifact_check.QUANTIZED_TOLERANCE, "compile: the build", "two samples", tmp_path / "log"
    )
    assert _channel_bulk(cpu, artifact) > artifact_check.QUANTIZED_TOLERANCE  # the strict comparison misses
    cpu_bulk, artifact_bulk = _channel_bulk(x, cpu), _channel_bulk(x, artifact)
    assert artifact_bulk == pytest.approx(k * cpu_bulk, rel=1e-4)
    if k <= artifact_check.FLOAT_MARGIN:
        record = artifact_check.check(source, float_model, samples, outputs, how)
        fidelity = record["against_float"]
        assert record["agrees"] and fidelity["holds"]
        assert fidelity["cpu_int8"]["bulk_channel_error"] == pytest.approx(cpu_bulk, rel=1e-4)
        assert fidelity["artifact"]["bulk_channel_error"] == pytest.approx(artifact_bulk, rel=1e-4)
        assert "as the CPU int8 model does" in artifact_check.summary(record)
    else:
        with pytest.raises(TerminalError) as failed:
            artifact_check.check(source, float_model, samples, outputs, how)
        text = str(failed.value)
        assert (
            f"the artifact errs {artifact_bulk:.3g} " in text
            and f"the CPU int8 model {cpu_bulk:.3g} " in text
        )
        assert f"allowed {artifact_check.FLOAT_MARGIN:g}x" in text
    # without the float model only the strict comparison exists
    with pytest.raises(TerminalError, match=r"tolerance 0\.25\); worst: .*; log "):
        artifact_check.check(source, None, samples, outputs, how)


def test_a_score_collapse_fails_against_float_too(tmp_path: Path) -> None:
    """A broken compile (a channel's scores gone) is far worse than the CPU int8 model against the
    float model: the fallback never saves it."""
    from backends.passes.data import Sample

    step = 1 / 32
    float_model, source = _scaled_pair(tmp_path, step)
    x = np.random.default_rng(6).uniform(0, 1, (1, 1, 2, 8, 8)).astype(np.float32)
    collapsed = np.round(x[0] / step) * step
    collapsed[0, 1][collapsed[0, 1] < 0.6] = 0.0
    outputs = ModelOutputs(["y"], [[collapsed.astype(np.float32)]])
    how = artifact_check.Check(
        artifact_check.QUANTIZED_TOLERANCE, "compile: the build", "one sample", tmp_path / "log"
    )
    artifact_bulk = _channel_bulk(x[:1], collapsed[None])
    with pytest.raises(TerminalError, match=f"the artifact errs {artifact_bulk:.3g} .* allowed"):
        artifact_check.check(source, float_model, [Sample("s", {"x": x[0]})], outputs, how)


def test_the_docs_state_the_checks_figures_from_the_code() -> None:
    """One tolerance and one margin, stated in the docs as the code defines them."""
    import math

    text = (Path(__file__).resolve().parents[2] / "docs" / "how-it-works.md").read_text()
    paragraph = " ".join(text[text.index("a compile runs its artifact") :].split("\n\n")[0].split())
    assert f"{artifact_check.QUANTIZED_TOLERANCE:g} for a quantized model" in paragraph
    assert artifact_check.QUANTIZED_STEPS == 4 and "less than four of its output's int8 steps" in paragraph
    margin = artifact_check.FLOAT_MARGIN
    assert f"at most {margin:g} times the CPU int8 model's" in paragraph
    assert f"20 log10 {margin:g} = {20 * math.log10(margin):.1f} dB" in paragraph
