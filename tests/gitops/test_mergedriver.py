"""The lock merge driver under a real `git merge`: two branches rebuilt different specs and different
stages of one spec; installed with one command, the driver merges the lock record by record, nothing
either side recorded is lost (kept, or named as left to a rebuild and still in the merge's parents), and
the result is a lock every command reads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from reconciler.engine import integrity
from tests.conftest import DIGITS_SPEC, git, run_npuctl


def _apply_and_commit(repo: Path, message: str) -> dict[str, Any]:
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return {n: json.loads((repo / "specs" / f"{n}.lock.json").read_text()) for n in ("digits", "other")}


def _changed(base: dict[str, Any], side: dict[str, Any]) -> dict[tuple[str, str, str], Any]:
    """(variant, "stages"|"measurements", name) -> record, for every record `side` changed from `base`."""
    out = {}
    for variant, entry in side["variants"].items():
        for kind in ("stages", "measurements"):
            before = base["variants"].get(variant, {}).get(kind, {})
            out |= {(variant, kind, n): r for n, r in entry[kind].items() if before.get(n) != r}
    return out


def _names(line: str, variant: str, kind: str, name: str) -> bool:
    """Whether a line of the driver names this record as left to a rebuild."""
    if kind == "stages":
        return f" {variant}/{name}: " in line
    listed = line.partition(f" {variant}: measurements ")[2].partition(":")[0]
    return name in listed.split(", ")


@pytest.mark.slow  # four real applies on two branches: the merge must see real records of each
def test_two_branches_merge_through_the_driver_with_no_evidence_lost(digits_repo: Path) -> None:
    repo = digits_repo
    (repo / "specs" / "other.yaml").write_text(DIGITS_SPEC.format(name="other"))
    installed = run_npuctl(repo, "lock", "install-merge-driver")
    assert installed.returncode == 0, installed.stderr
    assert "*.lock.json merge=npuctl-lock" in (repo / ".gitattributes").read_text().splitlines()
    base = _apply_and_commit(repo, "base")

    git(repo, "checkout", "-qb", "runs")  # evaluate rebuilt, and the other spec re-judged
    spec = repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 6"))
    other = repo / "specs" / "other.yaml"
    other.write_text(other.read_text().replace("p90: 1000", "p90: 900"))
    runs = _apply_and_commit(repo, "runs")

    git(repo, "checkout", "-q", "main")  # compile rebuilt, so evaluate too
    spec.write_text(spec.read_text() + "  compile: {optimization_level: 2}\n")
    level = _apply_and_commit(repo, "level")

    identity = {f"GIT_{who}_{what}": "t" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL")}
    done = subprocess.run(
        ["git", "merge", "-m", "merged", "runs"],
        cwd=repo,
        env={**os.environ, **identity},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    merged_text = (repo / "specs" / "digits.lock.json").read_text()
    assert "<<<<<<<" not in merged_text
    merged = json.loads(merged_text)
    assert json.loads((repo / "specs" / "other.lock.json").read_text()) == runs["other"]

    # every record either side changed is in the merged lock as written, or named as left to a rebuild
    kept = _changed({"variants": {}}, merged)
    dropped_lines = [line for line in done.stderr.splitlines() if line.startswith("npuctl lock merge:")]
    for side in (runs["digits"], level["digits"]):
        for (variant, kind, name), record in _changed(base["digits"], side).items():
            if kept.get((variant, kind, name)) == record:
                continue
            assert any(_names(line, variant, kind, name) for line in dropped_lines), (
                variant,
                name,
                done.stderr,
            )
    stages = merged["variants"]["default"]["stages"]
    assert stages["compile"] == level["digits"]["variants"]["default"]["stages"]["compile"]
    assert "evaluate" not in stages and any(
        "default/evaluate: changed on both sides" in ln for ln in dropped_lines
    )
    assert integrity.problems(merged, Path("digits.lock.json")) == []
    for parent in ("HEAD^1", "HEAD^2"):  # both sides' evaluate records stay in history
        blob = json.loads(git(repo, "show", f"{parent}:specs/digits.lock.json"))
        assert "evaluate" in blob["variants"]["default"]["stages"]

    status = run_npuctl(repo, "status", "--json")
    assert status.returncode == 0, status.stderr
    rows = {r["name"]: r for r in json.loads(status.stdout)["specs"]}
    assert rows["digits"]["status"] == "OutOfSync" and not rows["digits"]["lock_problems"]
    assert rows["other"]["status"] == "Healthy"
    rebuilt = run_npuctl(repo, "apply")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    after = json.loads((repo / "specs" / "digits.lock.json").read_text())["variants"]["default"]["stages"]
    assert after["compile"] == stages["compile"] and "evaluate" in after
    assert "Healthy" in run_npuctl(repo, "status").stdout
