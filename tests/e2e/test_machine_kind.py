"""A lock built on a machine of another kind (another vector ISA) is kept, not rewritten back and forth:
the cpu target's compile and evaluate keys hold `host_isa`, and a team's laptops and CI differ in it.

A machine of another kind cannot exist in this test, so the committed lock is rewritten by the test as
that machine would have written it (its compile and evaluate inputs name another `host_isa`, keys and
measurement digests recomputed here, so the lock is consistent): named as such, a forged lock.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, run_npuctl, signed_again
from tests.gitops.conftest import commit_all

pytestmark = pytest.mark.slow  # real builds in every test: minutes of the fast tier

SIGNED = ("record", "value", "evidence", "detail", "runner")


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _as_another_machine(lock_path: Path) -> str:
    """Rewrites the lock as a machine with another host_isa would have; returns that ISA."""
    lock = json.loads(lock_path.read_text())
    variant = lock["variants"]["default"]
    moved: dict[str, str] = {}
    other = ""
    for stage in variant["stages"].values():
        fingerprint = stage["inputs"].get("impl", {}).get("fingerprint", {})
        if "host_isa" not in fingerprint:
            continue
        other = "aarch64" if fingerprint["host_isa"].startswith("x86") else "x86_64-avx2"
        fingerprint["host_isa"] = other
        stage.get("impl", {}).get("fingerprint", {})["host_isa"] = other  # the entry's copy of inputs.impl
        old, stage["key"] = stage["key"], _digest(stage["inputs"])
        moved[old] = stage["key"]
    assert other and len(moved) >= 2, "compile and evaluate key on the host's ISA"
    for measurement in variant["measurements"].values():
        measurement["record"] = moved.get(measurement["record"], measurement["record"])
        measurement["digest"] = _digest({k: measurement.get(k) for k in SIGNED})
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    signed_again(lock_path.parents[1], lock_path)
    return other


def test_a_lock_from_a_machine_of_another_kind_is_kept_until_remeasured(digits_repo: Path) -> None:
    done = run_npuctl(digits_repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    lock_path = digits_repo / "specs" / "digits.lock.json"
    other = _as_another_machine(lock_path)
    commit_all(digits_repo, "built on another machine")
    assert run_npuctl(digits_repo, "validate").returncode == 0  # the forged lock is consistent
    committed = lock_path.read_bytes()

    # this machine's store holds its own build of the same keys-but-ISA: the lock still stands
    for command in (("plan", "--json"), ("apply", "--json")):
        done = run_npuctl(digits_repo, *command)
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)["specs"][0]
        stages = {s["name"]: s for s in result["stages"]}
        for name in ("compile", "evaluate"):
            assert stages[name]["action"] == "cached", stages[name]
            assert f"host_isa {other} -> " in stages[name]["reason"], stages[name]
            assert "machine of another kind" in stages[name]["reason"]
        assert any("default/evaluate" in c for c in result["carried_over"]), result["carried_over"]
        assert all(v["carried_over"] for v in result["slo"]), result["slo"]
        assert lock_path.read_bytes() == committed
    assert git(digits_repo, "status", "--porcelain") == ""

    # asked to, this machine builds and measures its own: the lock then holds this machine's ISA
    done = run_npuctl(digits_repo, "apply", "--remeasure", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    rewritten = json.loads(lock_path.read_text())["variants"]["default"]["stages"]
    isas = {s["inputs"]["impl"]["fingerprint"].get("host_isa") for s in rewritten.values()} - {None}
    assert isas and other not in isas, isas

    # a real change of the spec is built here whatever the lock's machine
    lock_path.write_bytes(committed)
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 6"))
    done = run_npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    stages = {s["name"]: s for s in json.loads(done.stdout)["specs"][0]["stages"]}
    assert stages["evaluate"]["action"] == "built", stages["evaluate"]
