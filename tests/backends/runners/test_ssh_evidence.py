"""Evidence names who measured: an ssh host on 127.0.0.1 running OpenVINO's CPU plugin for the Intel NPU
target is `measured:host` of that remote CPU, named, and its latency is evidence about that CPU, never a
pass of the NPU's latency SLO; the same host measuring the cpu target stays device evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, run_npuctl

pytestmark = pytest.mark.slow


def _cpu_model() -> str:
    """This machine's CPU model, read here from /proc/cpuinfo (the ssh host is this machine)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def test_ssh_cpu_plugin_for_an_npu_target_is_host_evidence_naming_the_remote_cpu(
    digits_repo: Path, sshd
) -> None:
    pytest.importorskip("openvino")
    spec = digits_repo / "specs" / "digits.yaml"
    text = (
        DIGITS_SPEC.format(name="digits")
        .replace("target: cpu", "target: intel-npu")
        .replace("warmup: 1", f"warmup: 1\n    runner: {sshd.url}")
    )
    spec.write_text(text)
    result = run_npuctl(digits_repo, "apply", "--json", env=sshd.env())
    out = json.loads(result.stdout)["specs"][0]
    stages = {s["name"]: s["action"] for s in out["stages"]}
    assert stages["evaluate"] == "built", result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0  # not verifiable here: not a failure, and never a plain pass
    assert out["health"] == "Unknown", out["health"]
    latency = next(v for v in out["slo"] if v["name"] == "latency_ms.p90")
    assert latency["evidence"] == "measured:host"
    assert latency["passed"] is None and latency["verdict"] == "met on host CPU", latency
    assert sshd.url.removeprefix("ssh://") in latency["detail"] and "not the target" in latency["detail"]
    cpu = _cpu_model()
    assert cpu and cpu in latency["detail"], latency["detail"]
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    measured = lock["variants"]["default"]["measurements"]["latency_ms.p90"]
    assert measured["on_target"] is False and cpu in measured["host"]
    accuracy = next(v for v in out["slo"] if v["name"] == "accuracy.min")
    assert accuracy["evidence"] == "measured:host" and accuracy["passed"] is True


def test_ssh_for_the_cpu_target_is_device_evidence(digits_repo: Path, sshd) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(
        DIGITS_SPEC.format(name="digits").replace("warmup: 1", f"warmup: 1\n    runner: {sshd.url}")
    )
    result = run_npuctl(digits_repo, "apply", "--json", env=sshd.env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    latency = next(v for v in json.loads(result.stdout)["specs"][0]["slo"] if v["name"] == "latency_ms.p90")
    assert latency["evidence"] == "measured:device" and latency["verdict"] == "pass"
