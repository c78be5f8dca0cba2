"""A toolchain child that dies of a real SIGSEGV fails its stage with the signal named; the other spec in
the same `apply` is built and reported, and the crashed spec's lock file keeps what it recorded before.

The crash comes from backends.sdk.child_call's test-only hook (NPUCTL_TEST_ONLY_SIGSEGV, matched against
the stage's log path): the child sends itself SIGSEGV, as ONNX Runtime does on some graphs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl


def _spec(name: str, level: int) -> str:
    return DIGITS_SPEC.format(name=name).replace(
        "  evaluate:", f"  compile: {{optimization_level: {level}}}\n  evaluate:"
    )


def _lock(repo: Path, name: str) -> dict:
    data: dict = json.loads((repo / "specs" / f"{name}.lock.json").read_text())
    return data


def test_a_segfaulting_child_fails_one_stage_and_the_other_spec_carries_on(git_repo: Path) -> None:
    copy_digits(git_repo, eval_samples=10, calib_samples=10)
    for name in ("crashy", "healthy"):
        (git_repo / "specs" / f"{name}.yaml").write_text(_spec(name, 2))
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "specs")
    first = run_npuctl(git_repo, "apply", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    first_lock = _lock(git_repo, "crashy")
    before = first_lock["variants"]["default"]["measurements"]
    assert before["latency_ms.p50"]["evidence"] == "measured:host"

    for name, level in (("crashy", 1), ("healthy", 0)):  # both compiles rebuild, under different keys
        (git_repo / "specs" / f"{name}.yaml").write_text(_spec(name, level))
    crash = {"NPUCTL_TEST_ONLY_SIGSEGV": "/crashy/default/compile-"}
    done = run_npuctl(git_repo, "apply", "--json", env=crash)
    assert done.returncode == 1, done.stdout + done.stderr  # a failed stage, not a dead reconciler (139)
    specs = {s["name"]: s for s in json.loads(done.stdout)["specs"]}
    compile_ = next(s for s in specs["crashy"]["stages"] if s["name"] == "compile")
    assert compile_["action"] == "failed"
    assert compile_["reason"].startswith("compile failed: onnxruntime child killed by SIGSEGV"), compile_
    assert "SIGSEGV" in Path(compile_["log"]).read_text()
    healthy = {s["name"]: s["action"] for s in specs["healthy"]["stages"]}
    assert healthy["compile"] == "built" and healthy["evaluate"] == "built", specs["healthy"]
    assert specs["healthy"]["status"] == "Healthy"
    assert {v["name"]: v["passed"] for v in specs["healthy"]["slo"]} == {
        "accuracy.min": True,
        "latency_ms.p90": True,
    }

    after = _lock(git_repo, "crashy")
    # the lock keeps what was recorded before the crash (the lock writer carries it over), out of sync
    assert after["sync"] == "OutOfSync", after["sync"]
    previous = first_lock["variants"]["default"]["stages"]["compile"]["key"]
    assert after["variants"]["default"]["stages"]["compile"]["key"] == previous
    kept = after["variants"]["default"]["measurements"]
    assert kept["latency_ms.p50"]["value"] == before["latency_ms.p50"]["value"], "the earlier evidence stays"
    # a SIGSEGV is deterministic: the stage is stalled, not retried until its inputs change
    again = run_npuctl(git_repo, "apply", "--json", "specs/crashy.yaml")
    (stalled,) = json.loads(again.stdout)["specs"]
    assert next(s for s in stalled["stages"] if s["name"] == "compile")["reason"].startswith("stalled: ")


def test_a_stage_past_its_time_limit_fails_in_one_line_instead_of_holding_the_run(git_repo: Path) -> None:
    """A toolchain that hangs in npuctl's child interpreter is killed at NPUCTL_STAGE_TIMEOUT_S: its
    stage fails naming the limit, and the apply ends."""
    copy_digits(git_repo, eval_samples=4, calib_samples=4)
    (git_repo / "specs" / "slow.yaml").write_text(_spec("slow", 2))
    done = run_npuctl(git_repo, "apply", "--json", env={"NPUCTL_STAGE_TIMEOUT_S": "0.05"})
    assert done.returncode == 1, done.stdout + done.stderr
    stages = json.loads(done.stdout)["specs"][0]["stages"]
    failed = [s for s in stages if s["action"] == "failed"]
    assert len(failed) == 1, stages
    assert "child did not answer within 0.05 s and was killed" in failed[0]["reason"], failed[0]
