"""Per-layer sensitivity: layer grouping, one-layer-quantized models, the greedy search and its report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from quant_helpers import DIGITS_CALIB, digits_model, ptq_config, run_quantize

from backends.passes.quant import sensitivity
from backends.passes.quant.calibration import ChunkReader
from backends.passes.quant.float_keep import without_layer
from backends.passes.quant.sensitivity import Layer, Ranked, Score, greedy, layers, sample_counts


def _hardswish_model() -> onnx.ModelProto:
    """conv -> *s +b -> hardswish (x * clip(x + 3, 0, 6) / 6) -> conv2 -> + residual (not fusable)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([0.9], np.float32), "s"),
        numpy_helper.from_array(np.array([0.1], np.float32), "b"),
        numpy_helper.from_array(np.array(3.0, np.float32), "three"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(6.0, np.float32), "six"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["s", "c1"], ["m"], name="scale"),
        helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
        helper.make_node("Add", ["a", "three"], ["a3"], name="hs_add"),
        helper.make_node("Clip", ["a3", "zero", "six"], ["cl"], name="hs_clip"),
        helper.make_node("Mul", ["a", "cl"], ["hm"], name="hs_mul"),
        helper.make_node("Div", ["hm", "six"], ["h"], name="hs_div"),
        helper.make_node("Conv", ["h", "w2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "x"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes,
        "hs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_layers_group_a_compute_node_with_its_fusable_epilogue() -> None:
    found = layers(_hardswish_model())
    assert [layer.name for layer in found] == ["conv1", "conv2"]
    assert found[0].nodes == ("conv1", "scale", "bias", "hs_add", "hs_clip", "hs_mul", "hs_div")
    assert found[1].nodes == ("conv2",)  # the residual Add joins another branch: not part of the layer


def _digits_qdq(tmp_path: Path) -> tuple[Path, Path]:
    model = digits_model(tmp_path)
    feeds = [{"image": np.load(p).astype(np.float32)} for p in sorted(DIGITS_CALIB.glob("*.npy"))[:32]]
    out = tmp_path / "qdq.onnx"
    quantize_static(
        str(model),
        str(out),
        ChunkReader(feeds),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        extra_options={"QDQKeepRemovableActivations": True},
    )
    return model, out


def _run(model: bytes | str, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"image": x})[0])


def test_without_layer_restores_float_exactly(tmp_path: Path) -> None:
    model, qdq = _digits_qdq(tmp_path)
    float_model, qdq_model = onnx.load(str(model)), onnx.load(str(qdq))
    weights = {t.name: t for t in float_model.graph.initializer}
    x = np.load(sorted(DIGITS_CALIB.glob("*.npy"))[0]).astype(np.float32)
    everything = {n.name for n in qdq_model.graph.node}
    restored = without_layer(qdq_model, everything, weights)
    assert np.abs(_run(restored, x) - _run(str(model), x)).max() < 1e-4
    assert np.abs(_run(str(qdq), x) - _run(str(model), x)).max() > 1e-4  # the quantized one differs
    unchanged = without_layer(qdq_model, set(), weights)
    assert np.array_equal(_run(unchanged, x), _run(str(qdq), x))


def _layer(name: str) -> Layer:
    return Layer(name, "Conv", (name,))


def test_greedy_keeps_the_most_sensitive_until_the_budget_holds(tmp_path: Path) -> None:
    ranked = [Ranked(_layer(n), 0.9, 10.0) for n in ("a", "b", "c", "d")]
    accuracy = {0: 0.90, 1: 0.95, 2: 0.992, 3: 0.999}

    class Fake:
        metric = "fake"

        def __call__(self, path: Path) -> Score:
            kept = int(path.name)
            return Score(accuracy[kept], 10.0 + kept)

    def build(chosen: object) -> Path:
        return tmp_path / str(len(list(chosen)))  # type: ignore[call-overload]

    search = greedy(ranked, build, Fake(), Score(0.90, 10.0), 0.01, 8, log=lambda _m: None)  # type: ignore[arg-type]
    assert [layer.name for layer in search.chosen] == ["a", "b"] and search.budget_met
    assert [s.accuracy for s in search.steps] == [0.90, 0.95, 0.992]
    capped = greedy(ranked, build, Fake(), Score(0.90, 10.0), 0.0, 1, log=lambda _m: None)  # type: ignore[arg-type]
    assert len(capped.chosen) == 1 and not capped.budget_met


def test_a_drop_equal_to_the_budget_meets_it(tmp_path: Path) -> None:
    """One string of 200 lost is a drop of 0.005 (1.0 - 0.995 = 0.0050000000000000044 in floats)."""
    ranked = [Ranked(_layer(n), 0.9, 10.0) for n in ("a", "b")]

    class Fake:
        metric = "fake"

        def __call__(self, path: Path) -> Score:
            return Score(0.995, 10.0)

    search = greedy(
        ranked,
        lambda _c: tmp_path / "x",
        Fake(),
        Score(0.99, 10.0),
        0.005,
        8,
        reference_accuracy=1.0,
        log=lambda _m: None,
    )  # type: ignore[arg-type]
    assert search.budget_met and [layer.name for layer in search.chosen] == ["a"]
    assert search.steps[-1].drop == 0.005


def test_sample_counts_follow_input_size() -> None:
    assert sample_counts(64, 300) == (300, 300)
    assert sample_counts(3 * 640 * 640, 300) == (4, 16)
    assert sample_counts(3 * 640 * 640, 10) == (4, 10)


def test_auto_on_digits_reports_a_ranked_table_and_steps(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    config = ptq_config(
        samples=64,
        activations="int8",
        sensitive_layers={"keep": "fp32", "auto": {"max_accuracy_drop": 0.0, "max_layers": 2}},
    )
    task = {"evaluate.task": {"type": "classification"}}
    out = run_quantize(config, model, tmp_path / "w", evaluate=task)
    auto = out.report["auto"]
    print(sensitivity.format_table(auto["table"], auto["metric"]))
    assert auto["metric"] == "classification top1_agreement"
    assert auto["data"]["source"] == "quantization.calibration.data" and not auto["data"]["slo_data"]
    rows = auto["table"]  # every quantization point: activation Q/DQ pairs and weights
    assert [row["rank"] for row in rows] == list(range(1, len(rows) + 1))
    assert len({row["layer"] for row in rows}) == len(rows)
    writers = sorted(row["op_type"] for row in rows if row["kind"] == "weight")
    assert writers == ["Conv", "Conv", "Gemm", "Gemm"]  # conv1, conv2, fc1 and head weights
    assert sum(row["kind"] == "activation" for row in rows) >= 4
    sqnr = [row["sqnr_db"] for row in rows]
    assert sqnr == sorted(sqnr)  # worst rounding first
    assert auto["samples"] == {"rank": 64, "search": 64}
    assert auto["steps"][0]["added"] is None
    assert len(auto["chosen"]) <= 2 and auto["final"]["accuracy"] >= auto["steps"][0]["accuracy"] - 1e-9
    kept_rules = {k["rule"] for k in out.report["kept"]}
    assert all(rule.startswith("auto: layer ") for rule in kept_rules)
    points = [c for c in auto["chosen"] if c["kind"] != "layer"]
    assert [p["tensor"] for p in out.report.get("kept_points", [])] == [
        c["layer"].split(" ", 1)[1] for c in points
    ]
    assert "rank" in (tmp_path / "w" / "quantize.log").read_text()


def test_scorer_uses_map_iou_for_single_channel_maps(tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])]
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "map", inputs, outputs)
    path = tmp_path / "map.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    from backends.passes.data import Sample

    samples = [
        Sample(str(i), {"x": np.random.default_rng(i).standard_normal((1, 1, 4, 4)).astype(np.float32)})
        for i in range(3)
    ]
    scorer = sensitivity.Scorer(path, samples)
    assert scorer.metric == "generic map_iou@0.5"
    assert scorer(path).accuracy == 1.0


def test_the_stage_note_says_the_auto_budget_was_met_and_on_which_data(tmp_path: Path) -> None:
    """A budget the search cannot meet fails the stage (tests/backends/passes/test_quantize_check.py)."""
    model = digits_model(tmp_path)
    config = ptq_config(
        samples=64,
        activations="int8",
        sensitive_layers={"keep": "fp32", "auto": {"max_accuracy_drop": 0.01, "max_layers": 1}},
    )
    out = run_quantize(config, model, tmp_path / "w")
    auto = out.report["auto"]
    where = "64 samples of quantization.calibration.data against the float model: not the SLO's data"
    assert where in out.note
    assert auto["budget_met"] and f"auto: {len(auto['chosen'])} kept (" in out.note
    assert "budget met (generic cosine drop <= 0.01" in out.note


def test_the_note_judges_the_final_artifact_not_only_the_search() -> None:
    """fp16 keeps are converted after the search: a final artifact over the budget is not "met"."""
    from backends.passes.quant import auto_search

    auto = {
        "budget": {"max_accuracy_drop": 0.01, "max_layers": 4},
        "chosen": [{"layer": "a"}],
        "metric": "classification top1",
        "data": {
            "text": "360 samples of evaluate.data (eval) against labels: the data the accuracy SLO is judged on"
        },
        "budget_met": True,
        "steps": [{"drop": 0.02}, {"drop": 0.0}],
        "final": {"drop": 0.0},
    }
    assert "budget met (classification top1 drop <= 0.01 on 360 samples" in auto_search.note(auto)
    auto["final"] = {"drop": 0.015}
    assert (
        "budget met in the search with 1 kept, NOT by the final artifact: classification top1 drop 0.0150"
        in (auto_search.note(auto))
    )


def test_greedy_does_not_keep_a_layer_that_does_not_help(tmp_path: Path) -> None:
    """Keeping a layer float can score worse on a small search set (rounding errors that cancelled no
    longer do): such a layer is skipped, the next tried, and the search never ends below its start."""
    ranked = [Ranked(_layer(n), 0.9, 10.0) for n in ("a", "b", "c", "d", "e")]
    gain = {"a": 0.02, "b": -0.05, "c": 0.0, "d": 0.03, "e": 0.01}

    class Fake:
        metric = "fake"

        def __call__(self, path: Path) -> Score:
            kept = path.name.split("-")[1:]
            return Score(0.90 + sum(gain[k] for k in kept), 10.0)

    def build(chosen: object) -> Path:
        return tmp_path / "-".join(["m", *(layer.name for layer in chosen)])  # type: ignore[attr-defined]

    search = greedy(ranked, build, Fake(), Score(0.90, 10.0), 0.0, 3, log=lambda _m: None)  # type: ignore[arg-type]
    assert [layer.name for layer in search.chosen] == ["a", "d", "e"]
    accuracies = [s.accuracy for s in search.steps]
    assert accuracies == sorted(accuracies) and accuracies[-1] == pytest.approx(0.96)


def test_a_tie_in_the_task_metric_is_broken_by_less_noise(tmp_path: Path) -> None:
    """Exact match over a few strings moves in whole strings: a layer that leaves it unchanged but takes
    2 dB of noise away is kept; one that ties with 0.5 dB is not (latency for nothing measurable)."""
    ranked = [Ranked(_layer(n), 0.5, 10.0) for n in ("a", "b", "c")]
    scores = {"a": (0.0, 2.0), "b": (0.0, 0.5), "c": (0.5, 1.0)}  # (accuracy gain, sqnr gain) each

    class Fake:
        metric = "fake"

        def __call__(self, path: Path) -> Score:
            kept = path.name.split("-")[1:]
            return Score(0.5 + sum(scores[k][0] for k in kept), 10.0 + sum(scores[k][1] for k in kept))

    def build(chosen: object) -> Path:
        return tmp_path / "-".join(["m", *(layer.name for layer in chosen)])  # type: ignore[attr-defined]

    search = greedy(ranked, build, Fake(), Score(0.5, 10.0), 0.0, 3, log=lambda _m: None)  # type: ignore[arg-type]
    assert [layer.name for layer in search.chosen] == ["a", "c"]
    assert [s.sqnr_db for s in search.steps] == [10.0, 12.0, 13.0]
