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
from tests.gitops.actions_local import JobRun, Runner, comment, fake_gh
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


def _pr(
    origin: Path, tmp_path: Path, name: str, old: str, new: str, applied: bool = True, remote: str = "none"
) -> Path:
    """A pull request's checkout: the spec edited and, when `applied`, its lock file re-applied (its
    build pushed to `remote`) and committed with it (else only the spec: a stale lock)."""
    clone = tmp_path / name
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "pr")
    edit(clone / "specs" / "digits.yaml", old, new)
    if applied:
        assert run_npuctl(clone, "apply", "--remote", remote).returncode in (0, 3)  # 3: an SLO fails
    commit_all(clone, f"pr: {new}")
    return clone


def _runner(tmp_path: Path, repo: Path) -> Runner:
    work = tmp_path / "runner"
    work.mkdir(exist_ok=True)
    context = {
        "github.base_ref": "main",
        "github.event_name": "pull_request",
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
    """The developer applied (pushing the build to the remote cache) and committed the lock: the gate
    passes without building, and the report carries the build pulled from the remote cache."""
    remote = (tmp_path / "remote").as_uri()
    pr = _pr(origin, tmp_path, "pr", "runs: 5", "runs: 6", remote=remote)
    runner = _runner(tmp_path, pr)
    runner.env["NPUCTL_REMOTE"] = remote
    job = _job(runner, pr)
    assert not job.failed, [(s.name, s.returncode, s.stderr[-800:]) for s in job.steps if s.returncode]
    assert job.step("Plan against the base branch").outputs["exit_code"] == "0", "the lock was committed"
    assert job.step("Check the committed lock files (merge gate)").outputs["exit_code"] == "0"
    assert job.step("Build the lock files the pull request should commit").skipped
    assert "every lock file matches its spec and every SLO is met" in job.step("Gate").stdout
    assert "| `spec.evaluate.runs` | `5` | `6` | evaluate |" in job.summary
    comment_md = (runner.work / "artifacts" / "npuctl-comment" / "comment.md").read_text()
    assert comment_md.startswith(MARKER) and "### npuctl plan against `origin/main`" in comment_md
    assert " built" not in job.step("Check the committed lock files (merge gate)").stderr
    report = (runner.work / "artifacts" / "npuctl-reports" / "digits.html").read_text()
    assert "<svg" in report and 'id="latency-0"' in report, "placement and latency from the remote cache"

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
    assert len(stored) == 1 and stored[0]["body"] == comment_md, "one marker comment, updated in place"


@pytest.mark.slow
def test_a_pull_request_whose_lock_is_stale_fails_the_gate_naming_it(origin: Path, tmp_path: Path) -> None:
    """The spec's SLO edited and only the spec committed: plan says changes pending, and the gate (apply
    --locked) fails naming the lock file; the job builds the lock to commit, and its report has data."""
    pr = _pr(origin, tmp_path, "pr", "p90: 1000", "p90: 999", applied=False)
    runner = _runner(tmp_path, pr)
    job = _job(runner, pr)
    gate = job.step("Check the committed lock files (merge gate)")
    assert gate.outputs["exit_code"] == "2"
    assert "specs/digits.lock.json would change: default/verify would rejudge" in gate.stderr
    assert re.search(r"^::error file=specs/digits\.lock\.json,title=npuctl%3A digits::", gate.stderr, re.M)
    final = job.step("Gate")
    assert final.returncode == 1 and "a committed lock file does not match its spec" in final.stdout
    locks = runner.work / "artifacts" / "npuctl-locks" / "specs" / "digits.lock.json"
    assert json.loads(locks.read_text())["slo"]["latency_ms"]["p90"] == 999, "the lock to commit"
    comment_md = (runner.work / "artifacts" / "npuctl-comment" / "comment.md").read_text()
    assert "specs/digits.lock.json would change" in comment_md
    reports = job.step("Prepare the pull-request comment and the reports").stdout
    assert "digits: no report (its build is neither in this job nor in the remote cache)" in reports
    assert not (runner.work / "artifacts" / "npuctl-reports" / "digits.html").exists(), "no empty report"


@pytest.mark.slow
def test_the_gate_fails_with_annotations_when_an_slo_fails(origin: Path, tmp_path: Path) -> None:
    pr = _pr(origin, tmp_path, "pr", "min: 0.5", "min: 0.9999")
    job = _job(_runner(tmp_path, pr), pr)
    apply = job.step("Check the committed lock files (merge gate)")
    assert apply.outputs["exit_code"] == "3"
    line = next(
        i for i, t in enumerate((pr / "specs" / "digits.yaml").read_text().splitlines(), 1) if "0.9999" in t
    )
    assert re.search(
        rf"^::error file=specs/digits.yaml,line={line},col=\d+,title=npuctl%3A digits::accuracy.min",
        apply.stderr,
        re.M,
    )
    gate = job.step("Gate")
    assert gate.returncode == 1 and "::error::an SLO failed or is unverified" in gate.stdout
    assert (tmp_path / "runner" / "artifacts" / "npuctl-comment" / "comment.md").exists(), (
        "the comment still goes out"
    )


def _this_interpreter(runner: Runner) -> None:
    """setup-python's venv as this checkout's npuctl on this interpreter, with no install step (quick
    tests; the runner clears PYTHONPATH, so the shim sets it)."""
    (runner.work / "python" / "bin").mkdir(parents=True)
    shim = runner.work / "python" / "bin" / "npuctl"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m reconciler "$@"\n')
    shim.chmod(0o755)
    (runner.work / "python" / "bin" / "pip").write_text("#!/bin/sh\nexit 0\n")
    (runner.work / "python" / "bin" / "pip").chmod(0o755)


def test_an_invalid_spec_fails_the_job_and_its_errors_go_into_the_comment(
    origin: Path, tmp_path: Path
) -> None:
    pr = _pr(origin, tmp_path, "pr", "runs: 5", "runs: -1", applied=False)
    runner = _runner(tmp_path, pr)
    _this_interpreter(runner)
    job = _job(runner, pr)
    validate = job.step("Validate specs")
    assert validate.outputs["exit_code"] == "1"
    assert re.search(
        r"^::error file=specs/digits\.yaml,line=\d+,col=\d+,title=npuctl%3A invalid spec::spec\.evaluate\.runs",
        validate.stdout,
        re.M,
    )
    assert job.step("Gate").returncode == 1 and "a spec is invalid" in job.step("Gate").stdout
    comment_md = (runner.work / "artifacts" / "npuctl-comment" / "comment.md").read_text()
    assert comment_md.startswith(MARKER)
    assert "#### npuctl validate" in comment_md and "spec.evaluate.runs" in comment_md, comment_md


def _comment_job(
    tmp_path: Path, stored: list[dict[str, object]], page_size: int, slurp: bool
) -> tuple[JobRun, Path]:
    """The comment workflow alone, on an artifact the PR job would have uploaded, against a FakeGitHubAPI
    holding `stored` and serving `page_size` comments a page."""
    runner = _runner(tmp_path, tmp_path)
    artifact = runner.work / "artifacts" / "npuctl-comment"
    artifact.mkdir(parents=True)
    (artifact / "pr-number").write_text("7\n")
    (artifact / "comment.md").write_text(f"{MARKER}\nthe new plan\n")
    api = tmp_path / "github-comments.json"
    api.write_text(json.dumps(stored))
    bin_dir = fake_gh(tmp_path / "fake-gh", api, page_size).parent
    runner.env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    workflow = COMMENT_WORKFLOW
    if slurp:
        workflow = tmp_path / "comment-slurp.yml"
        text = COMMENT_WORKFLOW.read_text()
        call = 'comments?per_page=100" --paginate'
        assert text.count(call) == 1
        workflow.write_text(text.replace(call, f"{call} --slurp"))
    commenter = tmp_path / "commenter"
    commenter.mkdir()
    runner.env["GITHUB_WORKSPACE"] = str(commenter)
    return runner.run_job(workflow, commenter), api


@pytest.mark.parametrize("slurp", [False, True], ids=["pages-back-to-back", "slurped"])
def test_the_bot_finds_its_own_comment_on_a_later_page(tmp_path: Path, slurp: bool) -> None:
    """Five comments, two to a page: `[..][..][..]` (or `[[..],[..],[..]]`); a user's comment that
    starts with the marker comes first and is left alone, the bot's on the last page is edited."""
    stored = [comment(1, 7, "looks good", "alice"), comment(2, 7, f"{MARKER}\nnot the bot", "mallory")]
    stored += [comment(3, 8, f"{MARKER}\nanother pull request", "github-actions[bot]")]
    stored += [comment(4, 7, "nit", "bob"), comment(5, 7, "ok", "carol")]
    stored += [comment(6, 7, f"{MARKER}\nthe old plan", "github-actions[bot]")]
    job, api = _comment_job(tmp_path, stored, 2, slurp)
    assert not job.failed, [(s.name, s.stdout, s.stderr) for s in job.steps]
    assert "updated comment 6" in job.steps[-1].stdout
    after = {c["id"]: c["body"] for c in json.loads(api.read_text())}
    assert after[6] == f"{MARKER}\nthe new plan\n"
    assert after[2] == f"{MARKER}\nnot the bot" and after[3].endswith("another pull request")
    assert len(after) == 6


def test_a_marker_comment_by_someone_else_is_never_edited(tmp_path: Path) -> None:
    stored = [comment(1, 7, f"{MARKER}\nplanted", "mallory"), comment(2, 7, "hi", "alice")]
    job, api = _comment_job(tmp_path, stored, 1, False)
    assert not job.failed and "created a comment on #7" in job.steps[-1].stdout
    after = json.loads(api.read_text())
    assert after[0]["body"] == f"{MARKER}\nplanted"
    assert after[-1]["user"]["login"] == "github-actions[bot]" and after[-1]["body"].endswith(
        "the new plan\n"
    )


def test_a_push_to_main_gates_saves_the_cache_and_pushes_the_remote(origin: Path, tmp_path: Path) -> None:
    """On main the same gate runs; the store the job holds (restored from the cache here) goes to the
    remote cache, and the cache is saved under main's key for every pull request to restore."""
    import shutil

    main = tmp_path / "main"
    git(tmp_path, "clone", "-q", str(origin), str(main))
    runner = _runner(tmp_path, main)
    runner.context["github.event_name"] = "push"
    runner.context["github.event.pull_request.number"] = ""
    _this_interpreter(runner)
    (runner.work / "cache").mkdir()
    shutil.copytree(origin / ".npuctl", runner.work / "cache" / "npuctl-Linux-earlier", symlinks=True)
    remote = tmp_path / "remote"
    runner.env["NPUCTL_REMOTE"] = remote.as_uri()
    job = _job(runner, main)
    gate = job.step("Check the committed lock files (merge gate)")
    assert not job.failed, (gate.outputs, gate.stdout, gate.stderr)
    assert job.step("Check the committed lock files (merge gate)").outputs["exit_code"] == "0"
    pushed = job.step("Push the build store to the remote cache").stdout
    assert re.search(r"push file://\S+: [1-9]\d* pushed", pushed), pushed
    assert any(remote.joinpath("records").rglob("*")), "the remote cache holds main's records"
    saved = [e.name for e in (runner.work / "cache").iterdir()]
    assert len(saved) == 2 and any(n != "npuctl-Linux-earlier" for n in saved), "saved under main's key"
    assert (runner.work / "artifacts" / "npuctl-reports" / "digits.html").exists(), "main's report"


def test_every_push_runs_and_main_saves_the_cache_and_pushes() -> None:
    """No static paths filter (what a spec reads may be anywhere); push to main runs the same job."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    on = workflow[True]
    assert on["push"] == {"branches": ["main"]} and not (on.get("pull_request") or {}).get("paths")
    steps = workflow["jobs"]["npuctl"]["steps"]
    push = next(s for s in steps if s.get("name") == "Push the build store to the remote cache")
    assert "github.event_name == 'push'" in push["if"] and "npuctl push" in push["run"]
    assert any("apply --locked" in s.get("run", "") for s in steps)


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
