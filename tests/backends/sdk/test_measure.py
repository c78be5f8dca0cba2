"""backends.sdk.measure: the evaluate half every backend shares (samples, runner outputs, scoring, the
measurement records), checked on a one-node model and a runner result written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.catalog import target
from backends.passes.data import model_inputs
from backends.runners.benchprog import sample_key
from backends.sdk import measure
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError


class _Runner:
    name = "fake"
    evidence = "measured:device"

    def describe(self) -> str:
        return "adb://board"


def _model(tmp_path: Path) -> Path:
    """y = x * 2 on a [1, 4] float input."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"], name="mul")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [two],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _request(tmp_path: Path, **inputs: Path) -> StageRequest:
    return StageRequest("evaluate", target("cpu"), {"evaluate": {}}, inputs, tmp_path, tmp_path / "e.log")


def _runner_job(tmp_path: Path, outputs: list[np.ndarray]) -> tuple[Path, dict[str, Any]]:
    """A job folder as a runner leaves it: outputs.npz and the result naming it."""
    job = tmp_path / "job"
    job.mkdir()
    np.savez(job / "outputs.npz", **{sample_key(i, 0): out for i, out in enumerate(outputs)})
    return job, {"outputs": {"names": ["y"], "samples": len(outputs), "file": "outputs.npz"}}


def test_without_evaluation_data_the_samples_are_seeded_random_inputs(tmp_path: Path) -> None:
    inputs = model_inputs(_model(tmp_path))
    first, source = measure.samples(_request(tmp_path), inputs)
    again, _ = measure.samples(_request(tmp_path), inputs)
    assert source == "random inputs (seed 0)" and len(first) == measure.RANDOM_SAMPLES
    assert all(np.array_equal(a.feed["x"], b.feed["x"]) for a, b in zip(first, again, strict=True))


def test_scoring_reads_the_runner_outputs_against_the_float_model(tmp_path: Path) -> None:
    model = _model(tmp_path)
    found, _ = measure.samples(_request(tmp_path), model_inputs(model))
    exact = [s.feed["x"] * 2 for s in found]
    job, result = _runner_job(tmp_path, exact)
    accuracy = measure.score_job(job, result, model, found, None, None)
    assert accuracy.fidelity.cosine == pytest.approx(1.0) and accuracy.samples == len(found)
    read = measure.read_outputs(job, result)
    assert read.names == ["y"] and all(
        np.array_equal(a[0], b) for a, b in zip(read.values, exact, strict=True)
    )


def test_a_runner_that_returns_fewer_samples_than_were_sent_fails(tmp_path: Path) -> None:
    model = _model(tmp_path)
    found, _ = measure.samples(_request(tmp_path), model_inputs(model))
    job, result = _runner_job(tmp_path, [found[0].feed["x"] * 2])
    with pytest.raises(TerminalError, match=f"outputs for 1 samples, {len(found)} were sent"):
        measure.score_job(job, result, model, found, None, None)


def test_the_placement_record_is_read_when_given(tmp_path: Path) -> None:
    assert measure.placement(_request(tmp_path)) == {}
    good, bad = tmp_path / "placement.json", tmp_path / "broken.json"
    good.write_text('{"precision": {"mul": "int8"}}')
    bad.write_text("{")
    assert measure.placement(_request(tmp_path, placement=good)) == {"precision": {"mul": "int8"}}
    with pytest.raises(TerminalError, match=r"cannot read broken\.json"):
        measure.placement(_request(tmp_path, placement=bad))


def test_the_float_model_is_loaded_only_for_a_target_with_an_npu(tmp_path: Path) -> None:
    model = _model(tmp_path)
    assert measure.float_model(_request(tmp_path, float_model=model)) is None  # cpu: no NPU cores
    npu = StageRequest("evaluate", target("rk3588"), {}, {"float_model": model}, tmp_path, tmp_path / "e.log")
    assert [n.name for n in measure.float_model(npu).graph.node] == ["mul"]


def test_profiled_iterations_are_capped_and_never_below_three() -> None:
    assert measure.profile_runs({"runs": 100}) == measure.PROFILE_RUNS
    assert measure.profile_runs({"runs": 10}) == 10 and measure.profile_runs({"runs": 1}) == 3


def test_measurements_carry_the_runner_evidence_except_what_the_host_measured(tmp_path: Path) -> None:
    model = _model(tmp_path)
    found, _ = measure.samples(_request(tmp_path), model_inputs(model))
    job, result = _runner_job(tmp_path, [s.feed["x"] * 2 for s in found])
    accuracy = measure.score_job(job, result, model, found, None, None)
    latency = {"p50": 1.23456789, "p90": 2.0, "p95": 2.5, "p99": 3.0, "mean": 1.5, "runs": 20, "warmup": 2}
    latency["noise"] = {"p90_over_p50": 1.62}
    result |= {
        "latency_ms": latency,
        "memory": {"delta_mb": 10.12345, "peak_rss_mb": 90.0, "peak_reset": True},
    }
    out = measure.measurements(result, _Runner(), accuracy, model, "random inputs (seed 0)")
    assert set(out) == {f"latency_ms.{k}" for k in measure.LATENCY_KEYS} | {
        "peak_memory_mb",
        "size_mb",
        "accuracy",
        "accuracy.reference",
    }
    assert out["latency_ms.p50"]["value"] == round(1.23456789, 6)
    assert "spread p90/p50 1.62" in out["latency_ms.p50"]["detail"]
    assert out["peak_memory_mb"]["value"] == 10.123 and "lower bound" not in out["peak_memory_mb"]["detail"]
    assert out["size_mb"] == {
        "value": round(model.stat().st_size / 1e6, 6),
        "evidence": "measured:host",
        "detail": "model.onnx bytes (MB = 1e6 bytes)",
    }
    evidence = {key: value["evidence"] for key, value in out.items()}
    assert {k for k, v in evidence.items() if v == "measured:host"} == {"size_mb", "accuracy.reference"}
    assert out["accuracy"]["value"] == accuracy.accuracy


def test_a_busy_host_is_named_in_the_details() -> None:
    assert (
        measure.noise_text({"noise": {"suspected": True, "why": "p90 4x p50"}}) == "; noisy host: p90 4x p50"
    )
    assert measure.noise_text({}) == ""
