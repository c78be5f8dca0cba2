"""The shipped CI examples, run end to end on this machine: the pull-request workflow and the comment
workflow through a local stand-in for GitHub's runner (tests/gitops/actions_local.py: real `run:` steps,
emulated `uses:` actions, a FakeGitHubAPI for `gh api`), and the pre-commit hook.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, git, run_npuctl, source_copy
from tests.gitops.actions_local import JobRun, Runner, fake_gh
from tests.gitops.conftest import commit_all, edit

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
COMMENT_WORKFLOW = ROOT / "examples" / "ci" / "github-actions-comment.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
PRE_COMMIT_CONFIG = ROOT / "examples" / "ci" / "pre-commit-config.yaml"
MARKER = "<!-- npuctl-plan -->"


@pytest.fixture
def origin(digits_repo: Path, tmp_path: Path) -> Path:
    """main: the applied digits spec with its lock file, and the requirements file the workflow installs
    from (this checkout's sources, as a user's file would pin a release)."""
    assert run_npuctl(digits_repo, "apply").returncode == 0
    (digits_repo / ".github").mkdir()
    (tmp_path / "npuctl-source").mkdir()
    source = source_copy(tmp_path / "npuctl-source")
    (digits_repo / ".github" / "npuctl-requirements.txt").write_text(f"npuctl @ {source.as_uri()}\n")
    commit_all(digits_repo, "main: digits")
    return digits_repo


def _pr(origin: Path, tmp_path: Path, name: str, old: str, new: str) -> Path:
    clone = tmp_path / name
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "pr")
    edit(clone / "specs" / "digits.yaml", old, new)
    commit_all(clone, f"pr: {new}")
    return clone


def _runner(tmp_path: Path, repo: Path) -> Runner:
    work = tmp_path / "runner"
    work.mkdir(exist_ok=True)
    context = {
        "github.base_ref": "main",
        "github.event.pull_request.number": "7",
        "github.event.workflow_run.event": "pull_request",
        "github.event.workflow_run.id": "1",
        "github.repository": "team/models",
        "github.token": "read-only-in-tests",
    }
    return Runner(work, context, {"GITHUB_WORKSPACE": str(repo), "NPUCTL_RETRY_BASE_S": "0.05"})


def _job(runner: Runner, repo: Path) -> JobRun:
    runner.env["GITHUB_WORKSPACE"] = str(repo)
    return runner.run_job(WORKFLOW, repo)


def test_the_pull_request_job_never_needs_a_write_token() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["permissions"] == {"contents": "read"}, "safe for pull requests from forks"
    assert "gh " not in WORKFLOW.read_text(), "the PR job never comments itself"
    comment = yaml.safe_load(COMMENT_WORKFLOW.read_text())
    assert list(comment[True]) == ["workflow_run"], (
        "runs in the base repository"
    )  # YAML 1.1 reads `on` as True
    assert "checkout" not in COMMENT_WORKFLOW.read_text(), "the comment job never runs the PR's code"


@pytest.mark.slow
def test_the_workflow_runs_end_to_end_and_comments_once(origin: Path, tmp_path: Path) -> None:
    pr = _pr(origin, tmp_path, "pr", "runs: 5", "runs: 6")
    runner = _runner(tmp_path, pr)
    job = _job(runner, pr)
    assert not job.failed, [(s.name, s.returncode, s.stderr[-800:]) for s in job.steps if s.returncode]
    assert job.step("Plan against the base branch").outputs["exit_code"] == "2", "changes pending is no error"
    assert job.step("Apply (merge gate)").outputs["exit_code"] == "0"
    assert "every spec built and every SLO met" in job.step("Gate on apply's exit code").stdout
    beats = job.step("Apply (merge gate)").stderr
    assert "npuctl: digits [default] evaluate built" in beats, "CI shows a heartbeat per stage"
    assert "| `spec.evaluate.runs` | `5` | `6` | evaluate |" in job.summary
    comment = (runner.work / "artifacts" / "npuctl-comment" / "comment.md").read_text()
    assert comment.startswith(MARKER) and "### npuctl plan against `origin/main`" in comment
    assert (runner.work / "artifacts" / "npuctl-reports" / "digits.html").stat().st_size > 10_000

    api = tmp_path / "github-comments.json"
    bin_dir = fake_gh(tmp_path / "fake-gh", api).parent
    runner.env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    commenter = tmp_path / "commenter"
    commenter.mkdir()
    first = runner.run_job(COMMENT_WORKFLOW, commenter)
    assert not first.failed and "created a comment on #7" in first.steps[-1].stdout
    second = runner.run_job(COMMENT_WORKFLOW, commenter)
    assert not second.failed and "updated comment" in second.steps[-1].stdout
    stored = json.loads(api.read_text())
    assert len(stored) == 1 and stored[0]["body"] == comment, "one marker comment, updated in place"

    again = _pr(origin, tmp_path, "fresh", "runs: 5", "runs: 6")  # a new runner's checkout, same cache
    rerun = _job(runner, again)
    assert not rerun.failed
    assert " built" not in rerun.step("Apply (merge gate)").stderr, (
        "the restored .npuctl cache builds nothing"
    )


@pytest.mark.slow
def test_the_gate_fails_with_annotations_when_an_slo_fails(origin: Path, tmp_path: Path) -> None:
    pr = _pr(origin, tmp_path, "pr", "min: 0.5", "min: 0.9999")
    job = _job(_runner(tmp_path, pr), pr)
    apply = job.step("Apply (merge gate)")
    assert apply.outputs["exit_code"] == "3"
    line = next(
        i for i, t in enumerate((pr / "specs" / "digits.yaml").read_text().splitlines(), 1) if "0.9999" in t
    )
    assert re.search(
        rf"^::error file=specs/digits.yaml,line={line},col=\d+,title=npuctl%3A digits::accuracy.min",
        apply.stderr,
        re.M,
    )
    gate = job.step("Gate on apply's exit code")
    assert gate.returncode == 1 and "::error::an SLO failed or is unverified" in gate.stdout
    assert (tmp_path / "runner" / "artifacts" / "npuctl-comment" / "comment.md").exists(), (
        "the comment still goes out"
    )


def test_an_invalid_spec_stops_the_workflow_at_validate(origin: Path, tmp_path: Path) -> None:
    pr = _pr(origin, tmp_path, "pr", "runs: 5", "runs: -1")
    runner = _runner(tmp_path, pr)
    (runner.work / "python").mkdir(parents=True)  # setup-python's venv: this interpreter, no install step
    (runner.work / "python" / "bin").mkdir()
    shim = runner.work / "python" / "bin" / "npuctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m reconciler "$@"\n')
    shim.chmod(0o755)
    (runner.work / "python" / "bin" / "pip").write_text("#!/bin/sh\nexit 0\n")
    (runner.work / "python" / "bin" / "pip").chmod(0o755)
    job = _job(runner, pr)
    validate = job.step("Validate specs")
    assert validate.returncode == 1
    assert re.search(
        r"^::error file=specs/digits\.yaml,line=\d+,col=\d+,title=npuctl%3A invalid spec::spec\.evaluate\.runs",
        validate.stderr,
        re.M,
    )
    assert [s.name for s in job.steps if s.returncode] == ["Validate specs"]
    after = job.steps[[s.name for s in job.steps].index("Validate specs") + 1 :]
    assert after and all(s.skipped for s in after), "nothing runs after an invalid spec"


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


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    """A bin folder whose `npuctl` is this checkout's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npuctl"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m reconciler "$@"\n')
    script.chmod(0o755)
    return bin_dir


def test_the_pre_commit_hook_runs_validate_on_a_real_repo(digits_repo: Path, shim: Path) -> None:
    [hook] = yaml.safe_load(HOOKS.read_text())
    config = yaml.safe_load(PRE_COMMIT_CONFIG.read_text())
    [local] = config["repos"]
    assert local["repo"] == "local", "no tag or URL to keep in step: the installed npuctl runs"
    [used] = local["hooks"]
    assert used["id"] == hook["id"] == "npuctl-validate" and used["entry"] == hook["entry"]
    assert used["files"] == hook["files"] and used["pass_filenames"] is False
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
