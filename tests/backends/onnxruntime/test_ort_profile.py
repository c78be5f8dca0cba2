"""evaluate's per-layer profile on real models: ORT's trace mapped onto the deployed ONNX nodes, costed,
attributed, recorded as profile.json beside a summary in the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from ort_helpers import compile_model

from backends import profiles
from backends.catalog import target
from backends.onnxruntime._evaluate import EvaluatePass
from backends.passes import placement
from backends.passes.importer import import_model
from backends.profiles.attribution import attribute
from backends.sdk.base import StageOutput, StageRequest
from tests.conftest import DIGITS

COMPUTE_OPS = {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool"}


def _imported(tmp: Path, source: Path, inputs: dict[str, list[int]]) -> Path:
    model, _ = import_model(source, inputs, lambda _: None)
    path = tmp / "model.onnx"
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


def _evaluate(tmp: Path, model: Path, target_id: str = "cpu", runs: int = 20) -> tuple[StageOutput, dict]:
    compiled = compile_model(model, tmp / "compiled", level=3, cores=1)
    report = placement.compute(onnx.load(str(model)), target(target_id), {"mode": "none"})
    (tmp / "placement.json").write_text(json.dumps(report))
    work = tmp / "eval"
    work.mkdir()
    request = StageRequest(
        "evaluate",
        target("cpu"),
        {"target": "cpu", "evaluate": {"runner": "local", "warmup": 3, "runs": runs, "timeout_s": 300}},
        {**compiled.artifacts, "model": model, "float_model": model, "placement": tmp / "placement.json"},
        work,
        tmp / "eval.log",
    )
    out = EvaluatePass().run(request)
    return out, profiles.read(out.artifacts["profile"])


@pytest.fixture(scope="module")
def digits_batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[StageOutput, dict, Path]:
    """Digits at a fixed batch of 64: enough work per kernel that ORT's per-node bookkeeping is small
    beside it (at batch 1 a kernel takes ~5 us, about what the profiler adds per node)."""
    tmp = tmp_path_factory.mktemp("digits")
    model = _imported(tmp, DIGITS / "model.onnx", {"image": [64, 1, 8, 8]})
    out, profile = _evaluate(tmp, model)
    return out, profile, model


def test_every_onnx_compute_node_is_billed_to_exactly_one_runtime_layer(digits_batch) -> None:
    _, profile, model = digits_batch
    billed = [name for layer in profile["layers"] for name in layer["onnx_nodes"]]
    assert len(billed) == len(set(billed)), "no ONNX node is billed twice"
    compute = {n.name for n in onnx.load(str(model)).graph.node if n.op_type in COMPUTE_OPS}
    assert compute <= set(billed)
    inserted = [layer for layer in profile["layers"] if layer["inserted"]]
    assert all(layer["op_type"].startswith("Reorder") for layer in inserted), inserted
    convs = [layer for layer in profile["layers"] if "/conv1/Conv" in layer["onnx_nodes"]]
    assert convs and {"/bn1/BatchNormalization", "/relu1/Relu"} <= set(convs[0]["onnx_nodes"])


def _expected_layer_ms(layer: dict, cost: dict) -> float:
    """ORT's figure less the probe's per-node cost, computed here from the recorded coefficients."""
    us = cost["base_us"] + cost["per_tensor_us"] * layer["tensors"] + cost["per_dim_us"] * layer["dims"]
    return max(0.0, layer["raw_time_ms"] - us / 1e3)


def _accounting(profile: dict) -> tuple[float, float]:
    """(layers / timed p50, (layers + fixed cost + dispatch) / timed p50), computed here. Each layer is
    ORT's kernel time less the profiler's own cost for a node of its tensors and dims (measured on the
    no-op probe); a run's fixed cost and the dispatch per node are the probe's, timed without the
    profiler; the timed p50 is the same evaluate's unprofiled latency."""
    cost = profile["profiler_cost"]
    assert cost["events"] >= 3 * 20 and cost["runs"] == profile["runs"]
    expected = [_expected_layer_ms(layer, cost) for layer in profile["layers"]]
    assert [layer["time_ms"] for layer in profile["layers"]] == pytest.approx(expected, abs=2e-6)
    assert sum(layer["raw_time_ms"] for layer in profile["layers"]) >= sum(expected)
    timed = profile["latency_ms"]["timed_p50"]
    fixed = cost["run_fixed_us"] / 1e3
    dispatch = cost["dispatch_per_node_us"] * len(profile["layers"]) / 1e3
    attribution = profile["attribution"]
    rounding = 1e-6 * len(expected)  # each layer is recorded to 1e-6 ms
    assert attribution["layers_sum_ms"] == pytest.approx(sum(expected), abs=rounding)
    unattributed = timed - sum(expected) - fixed - dispatch
    assert attribution["unattributed_ms"] == pytest.approx(unattributed, abs=rounding)
    assert "less that cost" in profile["how"]
    return sum(expected) / timed, (sum(expected) + fixed + dispatch) / timed


def test_layer_times_sum_to_the_same_runs_whole_latency(digits_batch, tmp_path: Path) -> None:
    """In each profiled run the layers' raw kernel times (summed by benchprog per run) fit inside the
    whole-run time ORT measured for that run, and the per-layer figures lie within the runs' range; with
    the profiler's cost removed they account for the unprofiled timed latency: judged on the median of
    five profiles (one profile beside a busy test worker read outside 15 %; a single recorded profile on
    a 2-core machine is good to about 25 %; in a full CI run two of three read 0.70 and 0.79, the timed
    runs slowed by the workers beside them and the profiled ones not)."""
    _, first, model = digits_batch
    measured = [first]
    for i in range(4):
        (tmp_path / str(i)).mkdir()
        measured.append(_evaluate(tmp_path / str(i), model)[1])
    ratios = []
    for profile in measured:
        assert all(r["kernels_us"] <= r["runtime_us"] for r in profile["per_run"])
        raw = sum(float(layer["raw_time_ms"]) for layer in profile["layers"])
        kernels = sorted(r["kernels_us"] / 1e3 for r in profile["per_run"])
        assert kernels[0] <= raw <= kernels[-1]
        ratios.append(_accounting(profile))
        assert profile["evidence"] == "measured:host"
        assert "separate iterations" in profile["how"] and "without the profiler" in profile["how"]
    layers = sorted(r[0] for r in ratios)[2]
    accounted = sorted(r[1] for r in ratios)[2]
    assert 0.85 <= layers <= 1.15 and 0.85 <= accounted <= 1.15, ratios


def test_costs_come_from_the_cost_model_and_the_roofline_is_named_an_estimate(digits_batch) -> None:
    _, profile, model = digits_batch
    gemm = next(layer for layer in profile["layers"] if "/head/Gemm" in layer["onnx_nodes"])
    graph = onnx.load(str(model)).graph
    weights = {t.name: t for t in graph.initializer}
    w = weights[next(n for n in graph.node if n.name == "/head/Gemm").input[1]]
    assert gemm["macs"] == 64 * w.dims[0] * w.dims[1]  # batch x in x out
    assert profile["evidence_of"]["macs"].startswith("estimated")
    attribution = profile["attribution"]
    assert attribution["utilisation_note"].startswith("estimated")
    top = attribution["top"][0]
    assert top["bound"] in ("compute", "memory") and top["roofline_ms"] > 0
    total = sum(float(layer["time_ms"]) for layer in profile["layers"])
    assert top["share"] == pytest.approx(float(top["time_ms"]) / total, abs=1e-4)


def test_the_report_holds_a_summary_and_the_lock_only_the_artifact(digits_batch) -> None:
    out, profile, _ = digits_batch
    summary = out.report["profile"]
    assert summary["file"] == "profile.json" and summary["layers"] == len(profile["layers"])
    assert "layers" not in json.dumps(out.report["measurements"])


def test_a_profile_of_microsecond_layers_says_it_is_coarse(digits_batch) -> None:
    """At batch 1 the digits layers take ~1 us each, within ORT's 1-us trace resolution and its own
    per-node cost: the attribution says so rather than presenting the shares as exact."""
    from backends.profiles.attribution import COARSE_LAYER_MS

    _, profile, _ = digits_batch
    assert profile["attribution"]["resolution"]["coarse"] is False
    tiny = [{**layer, "time_ms": COARSE_LAYER_MS / 2} for layer in profile["layers"]]
    assert attribute({**profile, "layers": tiny}, target("cpu"))["resolution"]["coarse"] is True


def test_a_model_fixed_at_a_batch_is_offered_a_batch_1_variant(digits_batch) -> None:
    """Digits fixed at batch 64: a request that comes alone still pays for 64. The suggestion's gain is
    the layers' time less 1/64 of it, computed here from the recorded layers."""
    _, profile, _ = digits_batch
    found = [s for s in profile["suggestions"] if s["field"] == "shape_variants"]
    assert len(found) == 1, profile["suggestions"]
    total = sum(float(layer["time_ms"]) for layer in profile["layers"])
    assert found[0]["value"] == [{"image": [1, 1, 8, 8]}]
    assert found[0]["expected_gain_ms"] == pytest.approx(total * (1 - 1 / 64), abs=1e-5)
    assert found[0]["estimate"].startswith("estimated") and "upper bound" in found[0]["why"]


def _upsampling_model() -> onnx.ModelProto:
    """32x32 frames resized up 2x (4x the pixels) before two convolutions."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(rng.standard_normal([16, 3, 3, 3]).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal([16, 16, 3, 3]).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["big"], name="up", mode="linear"),
        helper.make_node("Conv", ["big", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "upsampled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 64, 64])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_an_input_resized_up_before_the_first_layer_is_offered_a_variant_at_its_own_size(
    tmp_path: Path,
) -> None:
    """Every layer after the 2x Resize computes on 4x the input's pixels: the gain is 3/4 of the time of
    the layers downstream of it (computed here), and the Resize's own layer is not among them."""
    source = tmp_path / "source.onnx"
    onnx.save(_upsampling_model(), str(source))
    model = _imported(tmp_path, source, {"x": [1, 3, 32, 32]})
    profile = _evaluate(tmp_path, model)[1]
    found = [s for s in profile["suggestions"] if s["field"] == "shape_variants"]
    assert len(found) == 1, profile["suggestions"]
    downstream = {"conv1", "relu1", "conv2"}
    moved = [layer for layer in profile["layers"] if set(layer["onnx_nodes"]) & downstream]
    assert moved and not any("up" in layer["onnx_nodes"] for layer in moved)
    expected = sum(float(layer["time_ms"]) for layer in moved) * (1 - 32 * 32 / (64 * 64))
    assert found[0]["expected_gain_ms"] == pytest.approx(expected, abs=1e-5)
    assert "4.00x in pixels" in found[0]["why"]
