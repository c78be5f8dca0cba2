"""Evidence is never lost: what cannot run here keeps the committed lock record, and only a complete
build replaces it. Real git repositories, the real digits model, a real ssh client failing to reach a
closed port (an infrastructure error)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_npuctl, signed_again
from tests.gitops.conftest import commit_all, edit


def _lock(repo: Path, name: str = "digits") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((repo / "specs" / f"{name}.lock.json").read_text())
    return data


def _status(repo: Path) -> dict[str, dict[str, Any]]:
    done = run_npuctl(repo, "status", "--json")
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)["specs"]}


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    pytest.fail("no model name in /proc/cpuinfo")


@pytest.fixture
def committed(digits_repo: Path) -> Path:
    done = run_npuctl(digits_repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    commit_all(digits_repo, "applied")
    return digits_repo


def test_measurements_name_their_runner_and_record(committed: Path) -> None:
    lock = _lock(committed)
    variant = lock["variants"]["default"]
    evaluate_key = variant["stages"]["evaluate"]["key"]
    p90 = variant["measurements"]["latency_ms.p90"]
    assert p90["record"] == evaluate_key
    assert p90["runner"].startswith("local; ") and _cpu_model() in p90["runner"]
    for name, measurement in variant["measurements"].items():
        signed = {k: measurement.get(k) for k in ("record", "value", "evidence", "detail", "runner")}
        text = json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert measurement["digest"] == hashlib.sha256(text.encode()).hexdigest(), name
    for stage in variant["stages"].values():
        text = json.dumps(stage["inputs"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert stage["key"] == hashlib.sha256(text.encode()).hexdigest()


def test_an_infrastructure_error_keeps_the_committed_evidence(committed: Path) -> None:
    """The runner cannot be reached: apply fails (exit 1), the lock keeps the measured build whole."""
    before = _lock(committed)
    spec = committed / "specs" / "digits.yaml"
    edit(spec, "    warmup: 1\n", "    warmup: 1\n    runner: ssh://npuctl@127.0.0.1:9\n")
    done = run_npuctl(committed, "apply", "--json", env={"NPUCTL_RETRIES": "0"})
    assert done.returncode == 1, done.stdout + done.stderr
    [result] = json.loads(done.stdout)["specs"]
    assert result["status"] == "Failed" and result["sync"] == "OutOfSync"
    assert any("did not complete" in line for line in result["carried_over"])
    assert all(v["carried_over"] is True for v in result["slo"])
    after = _lock(committed)
    assert after["variants"] == before["variants"], "measurements, verdicts and stage keys kept whole"
    assert after["sync"] == "OutOfSync", "the recorded build is not of the spec as it is now"
    edit(spec, "    runner: ssh://npuctl@127.0.0.1:9\n", "")
    done = run_npuctl(committed, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    assert git(committed, "status", "--porcelain") == "", "back to the committed lock, byte for byte"


def test_a_store_that_cannot_be_written_keeps_the_committed_evidence(committed: Path) -> None:
    """The store is unusable (here: a file where its folder should be, since root ignores modes):
    every stage must rebuild and none can store its output; the lock keeps its measured build."""
    before = _lock(committed)
    store = committed / ".npuctl" / "store"
    shutil.rmtree(store)
    store.write_text("not a folder\n")
    edit(committed / "specs" / "digits.yaml", "runs: 5", "runs: 6")
    done = run_npuctl(committed, "apply", "--json", env={"NPUCTL_RETRIES": "0"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert _lock(committed)["variants"] == before["variants"], "no Failed stub: the evidence stands"
    assert _lock(committed)["health"] == before["health"]


def test_a_second_host_leaves_git_status_clean_until_asked_to_remeasure(
    committed: Path, tmp_path: Path
) -> None:
    """The committed measurements were taken on another machine (rewritten here as that machine's
    apply would have written them); a no-op apply keeps them; --remeasure keeps both."""
    lock_path = committed / "specs" / "digits.lock.json"
    lock = _lock(committed)
    other = "local; Other CPU x64; Linux aarch64; python 3.11.0"
    for measurement in lock["variants"]["default"]["measurements"].values():
        if "runner" in measurement:
            measurement["runner"] = other
            signed = {k: measurement.get(k) for k in ("record", "value", "evidence", "detail", "runner")}
            text = json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            measurement["digest"] = hashlib.sha256(text.encode()).hexdigest()
    lock_path.write_text(json.dumps(lock, sort_keys=True, indent=2, ensure_ascii=False) + "\n")
    signed_again(committed, lock_path)
    commit_all(committed, "measured on the other host")
    clone = tmp_path / "second-host"
    git(tmp_path, "clone", "-q", str(committed), str(clone))
    done = run_npuctl(clone, "apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    actions = {s["name"]: s["action"] for s in json.loads(done.stdout)["specs"][0]["stages"]}
    assert actions["evaluate"] == "cached"
    assert git(clone, "status", "--porcelain") == "", "this host's numbers do not replace the committed ones"
    done = run_npuctl(clone, "apply", "--remeasure", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    variant = _lock(clone)["variants"]["default"]
    here = variant["measurements"]["latency_ms.p90"]["runner"]
    assert _cpu_model() in here
    assert variant["verdicts_measured_on"] == here
    [kept] = variant["other_measurements"]
    assert kept["runner"] == other
    assert kept["measurements"] == lock["variants"]["default"]["measurements"]
