"""The shipped CI examples, run locally: the GitHub Actions steps that call npuctl, and the pre-commit hook.

The workflow's `run:` scripts are executed as Actions would (bash -eo pipefail, GITHUB_OUTPUT and
GITHUB_STEP_SUMMARY files, `${{ github.base_ref }}` substituted) in a clone of a real repository with a
pull-request branch; `npuctl` on PATH is this checkout. Steps needing GitHub (pip install, the comment)
are checked for shape only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, git, run_npuctl
from tests.gitops.conftest import commit_all, edit

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
PRE_COMMIT_CONFIG = ROOT / "examples" / "ci" / "pre-commit-config.yaml"
EXPRESSIONS = {"${{ github.base_ref }}": "main"}


def _steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    [job] = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _npuctl_steps() -> list[dict[str, Any]]:
    return [s for s in _steps() if re.search(r"^\s*npuctl ", s.get("run", ""), re.MULTILINE)]


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    """A bin folder whose `npuctl` is this checkout's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npuctl"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m reconciler "$@"\n')
    script.chmod(0o755)
    return bin_dir


@pytest.fixture
def pr_clone(digits_repo: Path, tmp_path: Path) -> Path:
    """origin: main with the applied digits spec; the clone has a PR branch changing evaluate.runs."""
    assert run_npuctl(digits_repo, "apply").returncode == 0
    commit_all(digits_repo, "main: digits")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(digits_repo), str(clone))
    git(clone, "checkout", "-q", "-b", "pr")
    edit(clone / "specs" / "digits.yaml", "runs: 5", "runs: 6")
    commit_all(clone, "pr: more timed runs")
    return clone


def _run_step(
    step: dict[str, Any], repo: Path, shim: Path, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    script = step["run"]
    for expression, value in EXPRESSIONS.items():
        script = script.replace(expression, value)
    assert "${{" not in script, f"unhandled expression in {step['name']}: {script}"
    output, summary = tmp_path / "github_output", tmp_path / "step_summary"
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "CI": "true",
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "NPUCTL_RETRY_BASE_S": "0.05",
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, output, summary


def test_workflow_shape() -> None:
    steps = _steps()
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0, "plan --base needs the base branch's history"
    names = [s["name"] for s in _npuctl_steps()]
    assert names == ["Validate specs", "Plan against the base branch", "Apply (merge gate)"]
    comment = next(s for s in steps if "gh pr comment" in s.get("run", ""))
    assert "--body-file plan.md" in comment["run"]
    plan = _npuctl_steps()[1]["run"]
    assert 'npuctl plan --base "origin/${{ github.base_ref }}" --format markdown > plan.md' in plan


@pytest.mark.slow
def test_workflow_steps_pass_on_a_good_pr(pr_clone: Path, shim: Path, tmp_path: Path) -> None:
    validate, plan, apply = _npuctl_steps()
    done, _, _ = _run_step(validate, pr_clone, shim, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    done, output, summary = _run_step(plan, pr_clone, shim, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exit_code=2" in output.read_text(), "changes pending is not an error"
    comment = (pr_clone / "plan.md").read_text()
    assert comment.startswith("### npuctl plan against `origin/main`")
    assert "| `spec.evaluate.runs` | `5` | `6` | evaluate |" in comment
    assert comment in summary.read_text()
    done, _, summary = _run_step(apply, pr_clone, shim, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every spec built and every SLO met" in done.stdout
    assert "### npuctl apply" in summary.read_text()


@pytest.mark.slow
def test_the_gate_fails_when_an_slo_fails(pr_clone: Path, shim: Path, tmp_path: Path) -> None:
    edit(pr_clone / "specs" / "digits.yaml", "min: 0.5", "min: 0.9999")
    commit_all(pr_clone, "pr: impossible accuracy")
    _, plan, apply = _npuctl_steps()
    done, output, _ = _run_step(plan, pr_clone, shim, tmp_path)
    assert done.returncode == 0 and "exit_code=2" in output.read_text()
    assert "spec.slo.accuracy.min" in (pr_clone / "plan.md").read_text()
    done, _, summary = _run_step(apply, pr_clone, shim, tmp_path)
    assert done.returncode == 1
    assert "::error::an SLO failed or is unverified" in done.stdout
    assert "❌ fail" in summary.read_text()


def test_an_invalid_spec_stops_the_workflow_at_validate(pr_clone: Path, shim: Path, tmp_path: Path) -> None:
    edit(pr_clone / "specs" / "digits.yaml", "runs: 6", "runs: -1")
    validate, plan, _ = _npuctl_steps()
    done, _, _ = _run_step(validate, pr_clone, shim, tmp_path)
    assert done.returncode == 1
    assert re.search(r"specs/digits\.yaml:\d+:\d+: spec\.evaluate\.runs", done.stdout + done.stderr)
    done, output, _ = _run_step(plan, pr_clone, shim, tmp_path)
    assert done.returncode == 1 and "exit_code=1" in output.read_text()


def _pre_commit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_pre_commit_files_are_valid_for_pre_commit_itself() -> None:
    pytest.importorskip("pre_commit", reason="pre-commit is in the dev extra")
    done = _pre_commit("validate-manifest", str(HOOKS))
    assert done.returncode == 0, done.stdout + done.stderr
    done = _pre_commit("validate-config", str(PRE_COMMIT_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_pre_commit_hook_runs_validate_on_a_real_repo(digits_repo: Path, shim: Path) -> None:
    [hook] = yaml.safe_load(HOOKS.read_text())
    config = yaml.safe_load(PRE_COMMIT_CONFIG.read_text())
    used = [h["id"] for repo in config["repos"] for h in repo["hooks"]]
    assert used == [hook["id"]] == ["npuctl-validate"]
    files = re.compile(hook["files"])
    assert files.search("specs/digits.yaml") and files.search("models/digits.onnx")
    assert not files.search("specs/digits.lock.json") and not files.search("README.md")
    assert hook["pass_filenames"] is False
    command = [*shlex.split(hook["entry"]), *hook.get("args", [])]
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, cwd=digits_repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    edit(digits_repo / "specs" / "digits.yaml", "warmup: 1", "warmpu: 1")
    done = subprocess.run(command, cwd=digits_repo, env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert re.search(r"specs/digits\.yaml:\d+:\d+: spec\.evaluate\.warmpu", done.stdout + done.stderr)
