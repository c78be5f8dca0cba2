"""compile on a real model: .ort artifacts that load, match the ONNX, honour the fusion switches, and are
byte-reproducible (ONNX Runtime's own ORT-format save is not)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from ort_helpers import compile_model

from backends.onnxruntime._ortformat import canonical_bytes
from backends.sdk.errors import TerminalError


def _run(path: Path, feed: dict[str, np.ndarray], level: str = "ORT_DISABLE_ALL") -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feed)]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_ort_artifact_loads_and_matches_the_onnx(tmp_path: Path, cls_onnx: Path, level: int) -> None:
    out = compile_model(cls_onnx, tmp_path / "w", level=level, cores=2)
    artifact = out.artifacts["ort"]
    assert artifact.suffix == ".ort" and artifact.read_bytes()[4:8] == b"ORTM"
    settings = json.loads(out.artifacts["session"].read_text())
    assert settings["intra_op_num_threads"] == 2
    assert settings["graph_optimization_level"] == ["disable_all", "basic", "extended", "all"][level]
    assert settings["load_optimization_level"] == "disable_all"
    feed = {"x": np.random.default_rng(level).standard_normal((1, 3, 48, 192)).astype(np.float32)}
    expected = _run(cls_onnx, feed)
    got = _run(artifact, feed)
    np.testing.assert_allclose(got[0], expected[0], atol=1e-4, rtol=0)
    assert out.report["reproducible"] is True
    assert out.report["artifact"]["size_bytes"] == artifact.stat().st_size
    assert out.report["nodes_after"] == sum(out.report["ops_after"].values())
    if level >= 2:
        assert out.report["nodes_after"] < out.report["nodes_before"]


@pytest.mark.parametrize("level", [0, 3])
def test_bytes_are_reproducible_within_a_process(tmp_path: Path, cls_onnx: Path, level: int) -> None:
    first = compile_model(cls_onnx, tmp_path / "a", level=level).artifacts
    second = compile_model(cls_onnx, tmp_path / "b", level=level).artifacts
    assert first["ort"].read_bytes() == second["ort"].read_bytes()
    assert first["session"].read_bytes() == second["session"].read_bytes()


def test_bytes_are_reproducible_across_processes(tmp_path: Path, cls_onnx: Path) -> None:
    """Level 3: the NCHWc transformer orders and names its nodes differently in every process."""
    here = Path(__file__).parent
    code = (
        f"import sys; sys.path.insert(0, {str(here)!r}); from pathlib import Path; from ort_helpers import compile_model; "
        f"out = compile_model(Path({str(cls_onnx)!r}), Path(sys.argv[1]), level=3); print(out.artifacts['ort'])"
    )
    paths = []
    for name in ("p1", "p2"):
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / name)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        paths.append(Path(done.stdout.strip().splitlines()[-1]))
    local = compile_model(cls_onnx, tmp_path / "here", level=3).artifacts["ort"]
    assert paths[0].read_bytes() == paths[1].read_bytes() == local.read_bytes()


def test_canonical_bytes_are_idempotent(tmp_path: Path, cls_onnx: Path) -> None:
    data = compile_model(cls_onnx, tmp_path / "w", level=2).artifacts["ort"].read_bytes()
    assert canonical_bytes(data) == data


@pytest.mark.parametrize(
    ("level", "switch", "gone", "kept"),
    [
        (2, "conv_bn", set(), {"BatchNormalization"}),
        (2, "conv_activation", {"com.microsoft.FusedConv"}, {"HardSigmoid", "Relu"}),
        (
            3,
            "conv_activation",
            {"com.microsoft.FusedConv", "com.microsoft.nchwc.Conv"},
            {"HardSigmoid", "Relu"},
        ),
        (2, "matmul_add", {"Gemm"}, {"MatMul"}),
        (2, "constant_folding", set(), {"Shape"}),
    ],
)
def test_fusion_switch_changes_the_optimized_graph(
    tmp_path: Path, cls_onnx: Path, level: int, switch: str, gone: set[str], kept: set[str]
) -> None:
    on = compile_model(cls_onnx, tmp_path / "on", level=level)
    off = compile_model(cls_onnx, tmp_path / "off", level=level, fusion={switch: False})
    ops_on, ops_off = set(on.report["ops_after"]), set(off.report["ops_after"])
    assert kept <= ops_off and not kept & ops_on, f"{switch}=false should keep {kept} unfused"
    assert gone <= ops_on and not gone & ops_off
    assert off.report["session"]["disabled_optimizers"]
    assert on.artifacts["ort"].read_bytes() != off.artifacts["ort"].read_bytes()
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)}
    np.testing.assert_allclose(
        _run(off.artifacts["ort"], feed)[0], _run(on.artifacts["ort"], feed)[0], atol=1e-4
    )


@pytest.mark.slow
def test_quantized_qdq_model_compiles_reproducibly(tmp_path: Path, cls_onnx: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from backends.passes.accuracy import fidelity, run_model
    from backends.passes.data import FeedReader, model_inputs, random_samples

    inputs = model_inputs(cls_onnx)
    qdq = tmp_path / "qdq.onnx"
    reader = FeedReader(lambda: iter(random_samples(inputs, 4, seed=0)))
    from backends.sdk.host import int8_dot

    # weights this host's kernels sum exactly (as the cpu target's quantize stage picks them): where
    # u8 x s8 sums clip, the compiled .ort would rightly fail its check against the QDQ math
    weights = QuantType.QInt8 if int8_dot() == "exact" else QuantType.QUInt8
    quantize_static(
        str(cls_onnx),
        str(qdq),
        reader,
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=weights,
        per_channel=True,
        extra_options={"WeightSymmetric": weights == QuantType.QInt8},
    )
    first = compile_model(qdq, tmp_path / "a", level=2)
    second = compile_model(qdq, tmp_path / "b", level=2)
    assert first.artifacts["ort"].read_bytes() == second.artifacts["ort"].read_bytes()
    assert "QLinearConv" in first.report["ops_after"]
    samples = random_samples(inputs, 3, seed=9)
    got = run_model(first.artifacts["ort"], samples)
    assert fidelity(run_model(qdq, samples).values, got.values).cosine > 0.999


def test_invalid_option_and_batch_are_terminal(tmp_path: Path, cls_onnx: Path) -> None:
    with pytest.raises(TerminalError, match=r"compile\.options\.turbo: not an onnxruntime option"):
        compile_model(cls_onnx, tmp_path / "a", options={"turbo": True})
    with pytest.raises(TerminalError, match=r"compile\.batch is 4 but input x has shape"):
        compile_model(cls_onnx, tmp_path / "b", batch=4)


def test_log_is_written(tmp_path: Path, cls_onnx: Path) -> None:
    compile_model(cls_onnx, tmp_path / "w", level=3)
    log = (tmp_path / "w" / "compile.log").read_text()
    assert "optimized graph" in log and "max |diff| 0" in log


def test_large_model_paths_build_the_same_artifact(
    tmp_path: Path, cls_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a large model takes (its canonical ONNX's weights in an external file for the ORT-format
    conversion, the agreement run in a benchprog process of its own) builds the bytes and the check
    the in-memory path builds. (The threshold stays above shape tensors' size, as 16 MiB does: ORT's
    shape inference cannot read a Reshape's shape from external data.)"""
    import onnx

    from backends.onnxruntime import _compile
    from backends.runners import local

    small = compile_model(cls_onnx, tmp_path / "small", level=3)
    monkeypatch.setattr(_compile, "EXTERNAL_BYTES", 4096)
    monkeypatch.setattr(_compile, "AGREE_IN_PROCESS_BYTES", 0)
    saved: list[str] = []
    jobs: list[str] = []
    save_model, run = onnx.save_model, local.LocalRunner.run

    def spy_save(model: Any, path: str, **kwargs: Any) -> None:
        saved.append(str(kwargs.get("location")))
        save_model(model, path, **kwargs)

    def spy_run(self: Any, job: Path, timeout_s: float, log: Path | None = None) -> Any:
        jobs.append(job.name)
        return run(self, job, timeout_s, log)

    monkeypatch.setattr(onnx, "save_model", spy_save)
    monkeypatch.setattr(local.LocalRunner, "run", spy_run)
    large = compile_model(cls_onnx, tmp_path / "large", level=3)
    assert saved == ["canon.onnx.data"]
    assert any(name.startswith(".scratch-ort-agree-") for name in jobs), jobs
    assert not list((tmp_path / "large").rglob(".scratch-*")), "the stage's scratch folders are removed"
    assert large.artifacts["ort"].read_bytes() == small.artifacts["ort"].read_bytes()
    assert large.report["check_max_abs_diff"] == small.report["check_max_abs_diff"]


def test_the_artifact_check_runs_the_ort_in_the_stage_process_as_evaluate_loads_it(
    tmp_path: Path, cls_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check needs outputs only: no benchprog child is started for it, and the .ort is loaded by
    benchprog's own session class with the options evaluate's job gives it."""
    from backends.onnxruntime._evaluate import load_options
    from backends.runners import bench_ort
    from backends.runners.local import LocalRunner

    started: list[Path] = []
    loaded: list[tuple[str, dict[str, Any]]] = []
    real_run, real_init = LocalRunner.run, bench_ort.OrtSession.__init__

    def spy_run(self: LocalRunner, job: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        started.append(job)
        return real_run(self, job, timeout_s, log)

    def spy_init(self: bench_ort.OrtSession, model: Path, options: dict[str, Any]) -> None:
        loaded.append((Path(model).suffix, dict(options)))
        real_init(self, model, options)

    monkeypatch.setattr(LocalRunner, "run", spy_run)
    monkeypatch.setattr(bench_ort.OrtSession, "__init__", spy_init)
    out = compile_model(cls_onnx, tmp_path / "w", level=3)
    assert out.report["check"]["samples"] >= 1  # the check ran on the .ort's outputs
    assert started == []
    settings = json.loads(out.artifacts["session"].read_text())
    assert loaded == [(".ort", load_options(settings))]
    assert loaded[0][1]["graph_optimization_level"] == "disable_all"  # loaded as saved
