"""evaluate's per-layer profile on real models: ORT's trace mapped onto the deployed ONNX nodes, costed,
attributed, recorded as profile.json beside a summary in the report."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from ort_helpers import compile_model

from backends import profiles
from backends.base import StageOutput, StageRequest
from backends.catalog import target
from backends.onnx import placement
from backends.onnx.importer import import_model
from backends.onnxruntime._evaluate import EvaluatePass
from backends.profiles.attribution import attribute
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


def test_layer_times_sum_to_the_same_runs_whole_latency(digits_batch) -> None:
    """In each profiled run, the layers' kernel times (summed by benchprog per run) within 15 % of the
    whole-run time ORT measured for that same run (the median run's ratio, so a preempted run does not
    decide); and the per-layer medians of the record add up to the median run's kernels."""
    _, profile, _ = digits_batch
    ratios = sorted(r["kernels_us"] / r["runtime_us"] for r in profile["per_run"])
    ratio = ratios[len(ratios) // 2]
    assert 0.85 <= ratio <= 1.0, ratios
    layers_sum = sum(float(layer["time_ms"]) for layer in profile["layers"])
    kernels = sorted(r["kernels_us"] / 1e3 for r in profile["per_run"])
    assert kernels[0] <= layers_sum <= kernels[-1]
    assert profile["evidence"] == "measured:host"
    assert "separate iterations" in profile["how"] and "without the profiler" in profile["how"]


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


@pytest.mark.slow
def test_a_rapidocr_model_on_rk3588s_placement_shows_its_cpu_fallbacks(tmp_path: Path) -> None:
    """The PP-OCR classifier profiled here, attributed against rk3588's placement: the layers whose ONNX
    nodes rk3588 runs on the CPU make up the fallback share (the host ran everything)."""
    from ort_helpers import rapidocr_model

    model = _imported(tmp_path, rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx"), {"x": [1, 3, 48, 192]})
    _, profile = _evaluate(tmp_path, model, "rk3588", runs=10)
    attribution = attribute(profile, target("rk3588"))
    fallback = [layer for layer in profile["layers"] if layer["placement"] and "CPU" in layer["placement"]]
    assert fallback, "rk3588 runs some of the classifier on its CPU"
    expected = sum(float(x["time_ms"]) for x in fallback) / sum(
        float(x["time_ms"]) for x in profile["layers"]
    )
    assert attribution["shares"]["cpu_fallback"] == pytest.approx(expected, abs=1e-3)
    assert set(attribution["fallback_layers"]) == {x["name"] for x in fallback}
    assert profile["runs"] == 10
