"""The local runner and the benchmark program, on a real model, plus its failure modes."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.passes.accuracy import run_model
from backends.runners import REQUEST_FILE, bench_files, parse_result, runner_for, write_request
from backends.runners.benchprog import FORMAT_VERSION, sample_key
from backends.runners.local import LocalRunner
from backends.sdk.errors import TerminalError, TransientError


def _job(tmp_path: Path, model: Path, samples: list[np.ndarray] | None = None, **extra: object) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    shutil.copyfile(model, job / "model.onnx")
    request: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "runtime": "onnxruntime",
        "model": "model.onnx",
        "options": {"intra_op_num_threads": 1, "graph_optimization_level": "all"},
        "warmup": 2,
        "runs": 15,
        "seed": 0,
        "samples": None,
        "outputs": None,
    }
    if samples is not None:
        np.savez(job / "samples.npz", **{sample_key(i, 0): s for i, s in enumerate(samples)})
        request.update(samples="samples.npz", sample_inputs=["x"], outputs="outputs.npz")
    request.update(extra)
    write_request(job, request)
    return job


def test_local_runner_measures_a_real_model(tmp_path: Path, cls_onnx: Path) -> None:
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 3, 48, 192)).astype(np.float32) for _ in range(3)]
    job = _job(tmp_path, cls_onnx, samples)
    log = tmp_path / "runner.log"
    result = LocalRunner().run(job, timeout_s=120, log=log)
    assert result["ok"] is True and result["runtime"] == "onnxruntime"
    lat = result["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert lat["runs"] == 15 and len(lat["samples"]) == 15 and lat["warmup"] == 2
    assert result["memory"]["peak_rss_mb"] > result["memory"]["baseline_rss_mb"] > 0
    assert result["memory"]["delta_mb"] > 0
    assert result["inputs"] == [{"name": "x", "shape": [1, 3, 48, 192], "dtype": "float32"}]
    assert result["timed_feed"] == "sample 0"
    assert result["device"]["cpu"]
    expected = run_model(cls_onnx, [{"x": s} for s in samples])
    with np.load(job / "outputs.npz") as archive:
        for i in range(3):
            np.testing.assert_allclose(archive[sample_key(i, 0)], expected.values[i][0], atol=1e-5)
    assert result["outputs"]["names"] == expected.names


def test_a_baseline_is_timed_in_the_same_run_like_the_model(tmp_path: Path, cls_onnx: Path) -> None:
    """The float model of an int8 build is timed after it by the same process, in alternation with a
    second session of the main model (its paired timing): the same feed, warm-up and runs, its own
    session with its options over the request's; the main answer is unchanged."""
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 3, 48, 192)).astype(np.float32) for _ in range(2)]
    job = _job(
        tmp_path,
        cls_onnx,
        samples,
        baseline={"model": "float.onnx", "options": {"graph_optimization_level": "disable_all"}},
    )
    shutil.copyfile(cls_onnx, job / "float.onnx")
    result = LocalRunner().run(job, timeout_s=120)
    timed, paired = result["baseline"]["latency_ms"], result["baseline"]["paired_ms"]
    assert timed["runs"] == 15 and timed["warmup"] == 2 and "samples" not in timed
    assert 0 < timed["min"] <= timed["p50"] <= timed["max"] and timed["mean"] > 0
    assert paired["runs"] == 15 and paired["warmup"] == 2 and paired["mean"] > 0
    assert result["baseline"]["load_ms"] > 0
    assert result["latency_ms"]["runs"] == 15 and result["outputs"]["samples"] == 2
    (job / "float.onnx").write_bytes(b"not a model")
    with pytest.raises(TerminalError, match=r"cannot load float\.onnx"):
        LocalRunner().run(job, timeout_s=120)


def test_a_slow_models_profile_and_baseline_take_the_runs_that_fit_their_budget(
    tmp_path: Path, cls_onnx: Path
) -> None:
    """With `budget_ms` and `least`, the profile and the float baseline run as many times as fit the
    budget at the timed p50, never fewer than `least` nor more than asked: a budget far below one run
    gives `least`, a budget of a thousand runs every run asked for."""
    import math

    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 3, 48, 192)).astype(np.float32)]
    (tmp_path / "probe").mkdir()
    probe = _job(tmp_path / "probe", cls_onnx, samples)
    p50 = LocalRunner().run(probe, timeout_s=120)["latency_ms"]["p50"]
    job = _job(
        tmp_path,
        cls_onnx,
        samples,
        baseline={"model": "float.onnx", "budget_ms": 1e-6, "least": 4},
        profile={"runs": 12, "budget_ms": 1e-6, "least": 3},
    )
    shutil.copyfile(cls_onnx, job / "float.onnx")
    result = LocalRunner().run(job, timeout_s=120)
    assert result["baseline"]["latency_ms"]["runs"] == result["baseline"]["paired_ms"]["runs"] == 4
    assert len(result["profile"]["runs"]) == 3 and "3 of at most 12" in result["profile"]["how"]
    budget = 1000 * p50  # a thousand runs' worth at the probe's p50: more than asked, so all of them
    request = json.loads((job / REQUEST_FILE).read_text())
    request["profile"]["budget_ms"] = request["baseline"]["budget_ms"] = budget
    write_request(job, request)
    result = LocalRunner().run(job, timeout_s=120)
    assert math.ceil(budget / result["latency_ms"]["p50"]) > 15
    assert result["baseline"]["latency_ms"]["runs"] == 15 and len(result["profile"]["runs"]) == 12


def test_random_feed_when_no_samples(tmp_path: Path, cls_onnx: Path) -> None:
    result = LocalRunner().run(_job(tmp_path, cls_onnx), timeout_s=120)
    assert result["timed_feed"] == "random, seed 0" and result["outputs"] is None


def test_timeout_is_transient(tmp_path: Path, cls_onnx: Path) -> None:
    job = _job(tmp_path, cls_onnx, runs=100000)
    with pytest.raises(TransientError, match=r"timed out after 0\.5 s on local"):
        LocalRunner().run(job, timeout_s=0.5)


class _Crashing(LocalRunner):
    def command(self, job_dir: Path) -> list[str]:
        code = "import os, sys; sys.stderr.write('loading model\\nsegmentation fault in kernel\\n'); sys.stderr.flush(); os.abort()"
        return [sys.executable, "-c", code]


def test_crash_is_transient_with_the_last_stderr_lines(tmp_path: Path, cls_onnx: Path) -> None:
    log = tmp_path / "crash.log"
    with pytest.raises(
        TransientError, match=r"crashed on local \(killed by signal 6\): loading model \| segmentation"
    ):
        _Crashing().run(_job(tmp_path, cls_onnx), timeout_s=60, log=log)
    assert "segmentation fault" in log.read_text()


def test_bad_model_is_terminal(tmp_path: Path, cls_onnx: Path) -> None:
    job = _job(tmp_path, cls_onnx)
    (job / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(TerminalError, match=r"onnxruntime cannot load model\.onnx"):
        LocalRunner().run(job, timeout_s=120)


def test_unknown_runtime_is_terminal(tmp_path: Path, cls_onnx: Path) -> None:
    with pytest.raises(TerminalError, match="runtime 'tensorrt' is not supported here"):
        LocalRunner().run(_job(tmp_path, cls_onnx, runtime="tensorrt"), timeout_s=120)


def test_parse_result_error_mapping() -> None:
    ok = {"format_version": 1, "ok": True}
    assert parse_result("ORT says hi\n" + json.dumps(ok) + "\n", "", 0, "here") == ok
    with pytest.raises(TerminalError, match="printed no JSON result: hello"):
        parse_result("hello\n", "", 0, "here")
    with pytest.raises(TransientError, match=r"exit 3\): x \| boom"):
        parse_result("", "x\nboom\n", 3, "here")
    with pytest.raises(TransientError, match="out of memory"):
        parse_result(json.dumps({"ok": False, "error": "out of memory", "kind": "transient"}), "", 2, "here")
    with pytest.raises(TerminalError, match="bad request"):
        parse_result(json.dumps({"ok": False, "error": "bad request", "kind": "terminal"}), "", 2, "here")


def test_runner_for_selects_by_scheme() -> None:
    from backends.runners.adb import AdbRunner
    from backends.runners.ssh import SshRunner

    assert runner_for("local").evidence == "measured:host"
    ssh = runner_for("ssh://pi@board")
    assert isinstance(ssh, SshRunner) and ssh.evidence == "measured:device" and ssh.port == 22
    adb = runner_for("adb://1234")
    assert isinstance(adb, AdbRunner) and adb.serial == "1234"
    with pytest.raises(TerminalError, match=r"unknown evaluate\.runner"):
        runner_for("ftp://x")


def test_benchprog_runs_standalone_beside_harness(tmp_path: Path, cls_onnx: Path) -> None:
    """As copied to a device: benchprog.py and harness.py in one folder, no `backends` package."""
    job = _job(tmp_path, cls_onnx, runs=3)
    for path in bench_files():
        shutil.copyfile(path, job / path.name)
    code = (
        "import runpy, sys; sys.modules['backends'] = None; "
        f"sys.argv = ['benchprog.py', {REQUEST_FILE!r}]; runpy.run_path('benchprog.py', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=job, capture_output=True, text=True, timeout=120)
    result = parse_result(done.stdout, done.stderr, done.returncode, "standalone")
    assert result["latency_ms"]["runs"] == 3


def test_bench_files_import_only_stdlib_numpy_and_runtimes() -> None:
    allowed = set(sys.stdlib_module_names) | {
        "numpy",
        "onnxruntime",
        "openvino",
        "rknnlite",
        "ai_edge_litert",
        "harness",
        "bench_common",
        "__future__",
    }
    for path in bench_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "backends.runners":
                assert [a.name for a in node.names] == ["bench_common"], f"{path.name} imports {node.module}"
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
