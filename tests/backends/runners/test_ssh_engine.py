"""`npuctl apply` measuring over ssh: a connection dropped mid-run is retried by the engine."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, run_npuctl

pytestmark = pytest.mark.slow


def test_apply_over_ssh_retries_a_dropped_connection(digits_repo: Path, sshd) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    text = (
        DIGITS_SPEC.format(name="digits")
        .replace("runs: 5", "runs: 20000")
        .replace("warmup: 1", f"warmup: 1\n    runner: {sshd.url}")
    )
    spec.write_text(text)
    done, killed = threading.Event(), []
    killer = threading.Thread(target=sshd.kill_session_when_benchmarking, args=(done, killed))
    killer.start()
    try:
        result = run_npuctl(digits_repo, "apply", "--json", env=sshd.env())
    finally:
        done.set()
        killer.join()
    assert killed, "the ssh session was never seen running benchprog"
    out = json.loads(result.stdout)
    stages = {s["name"]: s for s in out["specs"][0]["stages"]}
    assert stages["evaluate"]["action"] == "built", result.stdout + result.stderr
    verdicts = {v["name"]: v for v in out["specs"][0]["slo"]}
    assert verdicts["latency_ms.p90"]["evidence"] == "measured:device"
    logs = list((digits_repo / ".npuctl" / "logs").rglob("evaluate-*.log"))
    text = "\n".join(p.read_text() for p in logs)
    assert "failed or dropped" in text and "retrying" in text
