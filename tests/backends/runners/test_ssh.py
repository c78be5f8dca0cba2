"""The ssh runner end to end against a real sshd on 127.0.0.1, including a connection dropped mid-run."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from backends.passes.accuracy import run_model
from backends.runners import runner_for, write_request
from backends.runners.benchprog import FORMAT_VERSION, sample_key
from backends.runners.ssh import SshRunner
from backends.sdk.errors import TerminalError, TransientError

pytestmark = pytest.mark.slow


def _job(tmp_path: Path, model: Path, samples: list[np.ndarray], runs: int = 5) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "model.onnx").write_bytes(model.read_bytes())
    with (job / "samples.npz").open("wb") as fh:
        np.savez(fh, **{sample_key(i, 0): s for i, s in enumerate(samples)})
    write_request(
        job,
        {
            "format_version": FORMAT_VERSION,
            "runtime": "onnxruntime",
            "model": "model.onnx",
            "options": {"intra_op_num_threads": 1},
            "warmup": 1,
            "runs": runs,
            "seed": 0,
            "samples": "samples.npz",
            "sample_inputs": ["x"],
            "outputs": "outputs.npz",
        },
    )
    return job


def _runner(sshd: object) -> SshRunner:
    return SshRunner(
        user=sshd.user,  # type: ignore[attr-defined]
        host="127.0.0.1",
        port=sshd.port,  # type: ignore[attr-defined]
        key=str(sshd.key),  # type: ignore[attr-defined]
        options=sshd.options,  # type: ignore[attr-defined]
        python=sys.executable,
    )


def _samples(n: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((1, 3, 48, 192)).astype(np.float32) for _ in range(n)]


def test_ssh_runner_measures_on_the_remote_and_brings_outputs_back(
    tmp_path: Path, sshd, cls_onnx: Path
) -> None:
    samples = _samples()
    job = _job(tmp_path, cls_onnx, samples)
    runner = _runner(sshd)
    result = runner.run(job, timeout_s=120, log=tmp_path / "log.txt")
    assert result["ok"] is True and runner.evidence == "measured:device"
    assert result["latency_ms"]["runs"] == 5 and result["latency_ms"]["p50"] > 0
    with np.load(job / "outputs.npz") as archive:
        remote = [archive[sample_key(i, 0)] for i in range(len(samples))]
    local = run_model(cls_onnx, [{"x": s} for s in samples])
    for got, want in zip(remote, local.values, strict=False):
        np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-6)
    assert runner.describe() == f"ssh://{sshd.user}@127.0.0.1:{sshd.port}"


def test_runner_for_reads_reach_settings_from_the_environment(
    tmp_path: Path, sshd, cls_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in sshd.env().items():
        monkeypatch.setenv(key, value)
    runner = runner_for(sshd.url)
    assert isinstance(runner, SshRunner) and runner.key == str(sshd.key)
    result = runner.run(_job(tmp_path, cls_onnx, _samples(1), runs=2), timeout_s=120)
    assert result["ok"] is True


def test_remote_temp_folder_is_removed(tmp_path: Path, sshd, cls_onnx: Path) -> None:
    """The folder this run made on the device (here the same /tmp: other tests' runs make and remove
    theirs beside it, so the run's own folder is followed, not the whole glob) is gone after it."""
    runner = _runner(sshd)
    used: list[str] = []
    cleanup = runner._cleanup

    def followed(remote_dir: str, log: Path | None) -> None:
        used.append(remote_dir)
        assert Path(remote_dir).is_dir()  # it existed until the cleanup
        cleanup(remote_dir, log)

    runner._cleanup = followed  # type: ignore[method-assign]
    runner.run(_job(tmp_path, cls_onnx, _samples(1), runs=1), timeout_s=120)
    assert len(used) == 1 and used[0].startswith("/tmp/npuctl-bench-")
    assert not Path(used[0]).exists()


def test_benchprog_rejecting_the_request_is_terminal(tmp_path: Path, sshd, cls_onnx: Path) -> None:
    job = _job(tmp_path, cls_onnx, _samples(1))
    request = json.loads((job / "request.json").read_text())
    request["runtime"] = "no-such-runtime"
    (job / "request.json").write_text(json.dumps(request))
    with pytest.raises(TerminalError, match="no-such-runtime"):
        _runner(sshd).run(job, timeout_s=120)


def test_unreachable_host_is_transient(tmp_path: Path, sshd, cls_onnx: Path) -> None:
    runner = _runner(sshd)
    runner.port = sshd.port + 1 if sshd.port < 65535 else sshd.port - 1
    with pytest.raises(TransientError, match="ssh connection"):
        runner.run(_job(tmp_path, cls_onnx, _samples(1)), timeout_s=60)


def test_connection_dropped_mid_run_is_transient(tmp_path: Path, sshd, cls_onnx: Path) -> None:
    job = _job(tmp_path, cls_onnx, _samples(1), runs=20_000)
    done, killed = threading.Event(), []
    killer = threading.Thread(target=sshd.kill_session_when_benchmarking, args=(done, killed))
    killer.start()
    try:
        with pytest.raises(TransientError, match="failed or dropped"):
            _runner(sshd).run(job, timeout_s=60)
    finally:
        done.set()
        killer.join()
    assert killed, "the session was never seen running benchprog"


def test_openvino_runtime_over_ssh(tmp_path: Path, sshd, cls_onnx: Path) -> None:
    """benchprog's openvino runtime (added by the openvino backend) on the remote, IR files pushed."""
    ov = pytest.importorskip("openvino")
    job = _job(tmp_path, cls_onnx, _samples(1), runs=3)
    core = ov.Core()
    ov.save_model(core.read_model(str(cls_onnx)), str(job / "model.xml"), compress_to_fp16=False)
    (job / "model.onnx").unlink()
    request = json.loads((job / "request.json").read_text())
    request.update(
        runtime="openvino",
        model="model.xml",
        options={
            "device": "CPU",
            "properties": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"},
        },
    )
    (job / "request.json").write_text(json.dumps(request))
    result = _runner(sshd).run(job, timeout_s=120)
    assert result["runtime"] == "openvino" and "INFERENCE_PRECISION_HINT=f32" in result["providers"]
    with np.load(job / "outputs.npz") as archive:
        got = archive[sample_key(0, 0)]
    want = run_model(cls_onnx, [{"x": _samples(1)[0]}]).values[0][0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rknn_on_device_evaluation_goes_through_the_runner(
    tmp_path: Path, sshd, cls_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RKNN evaluate with an ssh runner pushes the .rknn and runs benchprog's rknnlite runtime with the
    recorded core mask; this "device" has no rknn-toolkit-lite2, which benchprog reports as terminal."""
    from backends.catalog import targets
    from backends.rknn.stages import RknnEvaluate
    from backends.sdk.base import StageRequest

    for key, value in sshd.env().items():
        monkeypatch.setenv(key, value)
    meta = tmp_path / "model.rknn.json"
    meta.write_text(json.dumps({"core_mask": {"cores": 3, "name": "NPU_CORE_0_1_2", "value": 7}}))
    rknn = tmp_path / "model.rknn"
    rknn.write_bytes(b"RKNN not a real model")
    work = tmp_path / "work"
    work.mkdir()
    config = {"target": "rk3588", "evaluate": {"runner": sshd.url, "warmup": 1, "runs": 2, "timeout_s": 60}}
    inputs = {"rknn": rknn, "rknn_meta": meta, "model": cls_onnx, "float_model": cls_onnx}
    request = StageRequest("evaluate", targets()["rk3588"], config, inputs, work, tmp_path / "eval.log")
    with pytest.raises(TerminalError, match="rknn-toolkit-lite2 is not installed"):
        RknnEvaluate().run(request)
