"""The adb runner: command construction (no adb here), a missing adb, and the protocol through a
stand-in adb that runs the commands locally (push = copy, shell = bash, pull = copy)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.runners import REQUEST_FILE, runner_for, write_request
from backends.runners.adb import AdbRunner, split_rc
from backends.runners.benchprog import FORMAT_VERSION, sample_key
from backends.sdk.errors import TerminalError, TransientError


def test_commands() -> None:
    runner = AdbRunner("emulator-5554", python="/data/local/tmp/py/bin/python3")
    remote = runner.remote_dir(Path("/tmp/npuctl-eval-abc"))
    assert remote == "/data/local/tmp/npuctl-bench-npuctl-eval-abc"
    assert runner.mkdir_command(remote) == ["adb", "-s", "emulator-5554", "shell", f"mkdir -p {remote}"]
    push = runner.push_command([Path("/j/model.ort"), Path("/j/request.json")], remote)
    assert push == ["adb", "-s", "emulator-5554", "push", "/j/model.ort", "/j/request.json", f"{remote}/"]
    bench = runner.bench_command(remote)
    assert bench[:4] == ["adb", "-s", "emulator-5554", "shell"]
    assert (
        bench[4] == f"cd {remote} && /data/local/tmp/py/bin/python3 benchprog.py {REQUEST_FILE}; echo __rc=$?"
    )
    assert runner.pull_command(f"{remote}/outputs.npz", Path("/j/outputs.npz"))[3:] == [
        "pull",
        f"{remote}/outputs.npz",
        "/j/outputs.npz",
    ]
    assert runner.cleanup_command(remote)[-1] == f"rm -rf {remote}"
    assert runner.evidence == "measured:device" and runner.describe() == "adb://emulator-5554"


def test_serial_with_port_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_ADB_PYTHON", "python3.11")
    runner = runner_for("adb://192.168.1.20:5555")
    assert (
        isinstance(runner, AdbRunner)
        and runner.serial == "192.168.1.20:5555"
        and runner.python == "python3.11"
    )


def test_split_rc() -> None:
    assert split_rc('{"ok": true}\n__rc=0\n') == ('{"ok": true}', 0)
    assert split_rc("Traceback\n__rc=137") == ("Traceback", 137)
    assert split_rc("") == ("", 1)


def test_missing_adb_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    job = tmp_path / "job"
    job.mkdir()
    write_request(job, {"format_version": FORMAT_VERSION})
    with pytest.raises(TerminalError, match="adb not installed"):
        AdbRunner("abc").run(job, timeout_s=10)


FAKE_ADB = """#!/usr/bin/env bash
# stand-in adb: the "device" is this machine
set -uo pipefail
[ "$1" = "-s" ] || { echo "usage" >&2; exit 1; }
serial="$2"; shift 2
[ "$serial" = "gone" ] && { echo "error: device 'gone' not found" >&2; exit 1; }
cmd="$1"; shift
case "$cmd" in
  push) dest="${@: -1}"; set -- "${@:1:$(($#-1))}"; cp "$@" "$dest" ;;
  pull) cp "$1" "$2" ;;
  shell) bash -c "$*" ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def fake_adb(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "adb"
    path.parent.mkdir()
    path.write_text(FAKE_ADB)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _job(tmp_path: Path, model: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "model.onnx").write_bytes(model.read_bytes())
    sample = np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)
    with (job / "samples.npz").open("wb") as fh:
        np.savez(fh, **{sample_key(0, 0): sample})
    write_request(
        job,
        {
            "format_version": FORMAT_VERSION,
            "runtime": "onnxruntime",
            "model": "model.onnx",
            "options": {"intra_op_num_threads": 1},
            "warmup": 1,
            "runs": 3,
            "samples": "samples.npz",
            "sample_inputs": ["x"],
            "outputs": "outputs.npz",
        },
    )
    return job


def test_protocol_through_a_stand_in_adb(tmp_path: Path, fake_adb: Path, cls_onnx: Path) -> None:
    device = tmp_path / "device"
    device.mkdir()
    runner = AdbRunner("fake", python=sys.executable, adb=str(fake_adb), base_dir=str(device))
    job = _job(tmp_path, cls_onnx)
    result = runner.run(job, timeout_s=120)
    assert result["ok"] is True and result["latency_ms"]["runs"] == 3
    assert (job / "outputs.npz").exists()
    assert not list(device.iterdir()), "the device folder is removed"


def test_device_gone_is_transient(tmp_path: Path, fake_adb: Path, cls_onnx: Path) -> None:
    runner = AdbRunner("gone", python=sys.executable, adb=str(fake_adb), base_dir=str(tmp_path))
    with pytest.raises(TransientError, match="not found"):
        runner.run(_job(tmp_path, cls_onnx), timeout_s=30)
