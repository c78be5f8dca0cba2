"""Acceptance: a pull request changing quantization, planned against its base and audited through git.

Two commits on a real repository: main applies the float model (v1); the PR switches quantization and
the model version (v2). `plan --base HEAD~1` must show the field diff and exactly the stages that read
the changed fields rebuilding (import stays cached); once applied and committed, the SLO table has old,
new and delta, and `audit` lists both model versions with their verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, run_npuctl

CASES = {
    # mode none -> fp16: check (precision), quantize and compile read quantization.mode
    "fp16": (
        "  target: cpu\n",
        "  target: cpu\n  quantization: {mode: fp16}\n",
        "spec.quantization.mode",
        ("none", "fp16"),
    ),
    # ptq per-channel -> per-tensor: only quantize reads per_channel
    "ptq-per-channel": (
        "  target: cpu\n  quantization: {mode: ptq, per_channel: true, calibration: {data: ../data/calib, samples: 40}}\n",
        "  target: cpu\n  quantization: {mode: ptq, per_channel: false, calibration: {data: ../data/calib, samples: 40}}\n",
        "spec.quantization.per_channel",
        (True, False),
    ),
}
EXPECTED_STAGES = {"fp16": ["check", "quantize", "compile"], "ptq-per-channel": ["quantize"]}


def _run(repo: Path, *args: str, codes: tuple[int, ...]) -> str:
    done = run_npuctl(repo, *args)
    assert done.returncode in codes, f"{args} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_pr_changing_quantization_plan_against_base_then_audit(digits_repo: Path, case: str) -> None:
    before, after, field, (old, new) = CASES[case]
    spec = digits_repo / "specs" / "digits.yaml"
    if case != "fp16":
        spec.write_text(spec.read_text().replace("  target: cpu\n", before))
    _run(digits_repo, "apply", codes=(0,))
    first = _commit(digits_repo, "digits v1")

    text = spec.read_text().replace(before, after).replace("version: v1", "version: v2")
    spec.write_text(text)
    _commit(digits_repo, f"digits v2: {case}")

    plan = json.loads(_run(digits_repo, "plan", "--base", "HEAD~1", "--json", codes=(2,)))
    stages = {s["name"]: s["action"] for s in plan["specs"][0]["stages"]}
    assert stages["import"] == "cached"
    for stage in EXPECTED_STAGES[case]:
        assert stages[stage] == "build", (stage, stages)
    entry = plan["base"]["specs"][0]
    assert entry["change"] == "modified" and entry["applied"] is False
    fields = {f["path"]: (f["old"], f["new"], f["stages"]) for f in entry["fields"]}
    assert fields[field][:2] == (old, new)
    assert set(EXPECTED_STAGES[case]) <= set(fields[field][2])
    assert fields["spec.model.version"] == ("v1", "v2", [])
    assert entry["rebuild"][0] == EXPECTED_STAGES[case][0]
    markdown = _run(digits_repo, "plan", "--base", "HEAD~1", "--format", "markdown", codes=(2,))
    assert f"| `{field}` |" in markdown and "⏳ pending apply" in markdown

    _run(digits_repo, "apply", codes=(0, 3))
    git(digits_repo, "add", "-A")
    git(digits_repo, "commit", "-q", "--amend", "--no-edit")  # the PR now carries its applied lock
    second = git(digits_repo, "rev-parse", "HEAD").strip()
    plan = json.loads(_run(digits_repo, "plan", "--base", "HEAD~1", "--json", codes=(0,)))
    entry = plan["base"]["specs"][0]
    assert entry["applied"] is True and entry["rebuild"] == []
    rows = {r["name"]: r for r in entry["slo"]}
    assert set(rows) == {"latency_ms.p90", "accuracy.min"}
    for row in rows.values():
        assert row["old"] is not None and row["new"] is not None
        assert row["delta"] == pytest.approx(row["new"] - row["old"])
    markdown = _run(digits_repo, "plan", "--base", "HEAD~1", "--format", "markdown", codes=(0,))
    assert "| accuracy.min | default | >= 0.5 |" in markdown

    audit = json.loads(_run(digits_repo, "audit", "--json", codes=(0,)))
    commits = [e for e in audit["entries"] if e["source"] == "commit"]
    assert [e["commit"] for e in commits] == [second, first]
    assert [e["model"]["version"] for e in commits] == ["v2", "v1"]
    for e in commits:
        assert {v["name"] for v in e["verdicts"]} == {"latency_ms.p90", "accuracy.min"}
        assert all(v["evidence"] and v["value"] is not None for v in e["verdicts"])
        assert e["toolchains"]["compile"]["fingerprint"], "toolchain versions are part of the evidence"
    versions = {row["model_version"] for row in audit["summary"]}
    assert versions == {"v1", "v2"}
    v1_only = json.loads(_run(digits_repo, "audit", "--model", "v1", "--json", codes=(0,)))
    assert {e["model"]["version"] for e in v1_only["entries"]} == {"v1"}
    text = _run(digits_repo, "audit", codes=(0,))
    assert "v1@" in text and "v2@" in text
