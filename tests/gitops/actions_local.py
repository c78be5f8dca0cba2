"""A local runner for the subset of GitHub Actions that npuctl's example workflows use.

GitHub's hosted runners cannot exist here, so this stands in for them, and says so: every `run:` step is
executed for real (bash -eo pipefail, GITHUB_OUTPUT / GITHUB_STEP_SUMMARY files, `${{ }}` expressions
substituted, `if:` evaluated), and the few `uses:` actions are emulated by what they do to the work tree:

- actions/checkout: the test's git clone is the checkout; setup-python: a virtualenv with the system's
  packages, first on PATH (so `pip install` in a step installs into it);
- actions/cache: restore `path` from a folder keyed by the expanded key (or a restore-key prefix), save it
  after the job when the key missed;
- actions/upload-artifact / download-artifact: copy to and from a folder of artifacts.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests import nested_venv

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class StepRun:
    name: str
    skipped: bool = False
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobRun:
    steps: list[StepRun]
    summary: str

    @property
    def failed(self) -> bool:
        return any(s.returncode != 0 for s in self.steps)

    def step(self, name: str) -> StepRun:
        return next(s for s in self.steps if s.name == name)


@dataclass
class Runner:
    work: Path
    """Where the runner keeps its cache, artifacts and virtualenv (outside the repository)."""
    context: dict[str, str]
    """Expression values, e.g. {"github.base_ref": "main", "github.event.pull_request.number": "7"}."""
    env: dict[str, str] = field(default_factory=dict)

    def run_job(self, workflow: Path, repo: Path) -> JobRun:
        [job] = yaml.safe_load(workflow.read_text())["jobs"].values()
        steps: list[StepRun] = []
        outputs: dict[str, dict[str, str]] = {}
        summary = self.work / f"summary-{len(list(self.work.glob('summary-*')))}.md"
        summary.write_text("")
        saves: list[tuple[Path, Path]] = []
        if job.get("if") and not self._condition(job["if"], outputs, steps):
            return JobRun([], "")
        for i, step in enumerate(job["steps"]):
            name = step.get("name") or step.get("uses") or f"step {i}"
            condition = step.get("if", "success()")  # GitHub's default: only while nothing failed
            if not self._condition(condition, outputs, steps):
                steps.append(StepRun(name, skipped=True))
                continue
            if "run" in step:
                result = self._run(step, name, repo, summary, outputs)
            else:
                result = self._uses(step, name, repo, outputs, saves)
            steps.append(result)
            if step.get("id"):
                outputs[step["id"]] = result.outputs
        for path, entry in saves:  # actions/cache saves in its post step, after the job's own steps
            if path.exists() and not entry.exists():
                shutil.copytree(path, entry, symlinks=True)
        return JobRun(steps, summary.read_text())

    # --- expressions ---------------------------------------------------------------------------------
    def _value(self, expr: str, outputs: dict[str, dict[str, str]]) -> str:
        match = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
        if match:
            return outputs.get(match.group(1), {}).get(match.group(2), "")
        if expr.startswith("hashFiles("):
            return self._hash_files(re.findall(r"'([^']+)'", expr))
        if expr == "runner.os":
            return "Linux"
        assert expr in self.context, f"the local runner has no value for ${{{{ {expr} }}}}"
        return self.context[expr]

    def _expand(self, text: str, outputs: dict[str, dict[str, str]]) -> str:
        return EXPRESSION.sub(lambda m: self._value(m.group(1), outputs), text)

    def _condition(self, cond: str, outputs: dict[str, dict[str, str]], steps: list[StepRun]) -> bool:
        cond = EXPRESSION.sub(lambda m: m.group(1), cond)
        ok = True
        for part in [p.strip() for p in cond.split("&&")]:
            if part in ("always()", "success()"):
                continue
            match = re.fullmatch(r"(\S+)\s*(==|!=)\s*'([^']*)'", part)
            assert match, f"the local runner cannot evaluate `if: {cond}`"
            left = self._value(match.group(1), outputs)
            ok &= (left == match.group(3)) == (match.group(2) == "==")
        failed = any(s.returncode != 0 for s in steps)
        return ok and ("always()" in cond or not failed)

    def _hash_files(self, patterns: list[str]) -> str:
        digest = hashlib.sha256()
        repo = Path(self.env["GITHUB_WORKSPACE"])
        for pattern in patterns:
            for path in sorted(repo.glob(pattern)):
                digest.update(path.read_bytes())
        return digest.hexdigest()

    # --- steps ---------------------------------------------------------------------------------------
    def _base_env(self, summary: Path) -> dict[str, str]:
        venv = self.work / "python"
        env = {**os.environ, **self.env}
        env.pop("PYTHONPATH", None)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}" if venv.exists() else env["PATH"]
        env.update({"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
        return env

    def _run(
        self, step: dict[str, Any], name: str, repo: Path, summary: Path, outputs: dict[str, dict[str, str]]
    ) -> StepRun:
        output = self.work / "github_output"
        output.write_text("")
        env = self._base_env(summary)
        env["GITHUB_OUTPUT"] = str(output)
        env.update({k: self._expand(str(v), outputs) for k, v in (step.get("env") or {}).items()})
        script = self._expand(step["run"], outputs)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        values = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        return StepRun(name, False, done.returncode, done.stdout, done.stderr, values)

    def _uses(
        self,
        step: dict[str, Any],
        name: str,
        repo: Path,
        outputs: dict[str, dict[str, str]],
        saves: list[tuple[Path, Path]],
    ) -> StepRun:
        action = step["uses"].split("@")[0]
        args = {k: self._expand(str(v), outputs) for k, v in (step.get("with") or {}).items()}
        if action == "actions/checkout":
            return StepRun(name)
        if action == "actions/setup-python":
            venv = self.work / "python"
            if not venv.exists():
                nested_venv.create(venv)  # this interpreter's packages, as setup-python's cache would hold
            return StepRun(name)
        if action == "actions/cache":
            entries = self.work / "cache"
            entries.mkdir(exist_ok=True)
            target = repo / args["path"]
            hit = entries / args["key"]
            prefixes = [p for p in args.get("restore-keys", "").splitlines() if p]
            candidates = (
                [hit]
                if hit.exists()
                else sorted(e for e in entries.iterdir() if any(e.name.startswith(p) for p in prefixes))
            )
            if candidates and not target.exists():
                shutil.copytree(candidates[-1], target, symlinks=True)
            saves.append((target, hit))
            return StepRun(name, outputs={"cache-hit": str(hit.exists()).lower()})
        if action == "actions/upload-artifact":
            dest = self.work / "artifacts" / args["name"]
            shutil.copytree(repo / args["path"], dest, dirs_exist_ok=True)
            return StepRun(name)
        if action == "actions/download-artifact":
            shutil.copytree(self.work / "artifacts" / args["name"], repo, dirs_exist_ok=True)
            return StepRun(name)
        raise AssertionError(f"the local runner does not emulate {action}")


FAKE_GH = '''#!{python}
"""FakeGitHubAPI: stands in for `gh api` against GitHub's REST API, which cannot exist here. It keeps one
repository's issue comments in a JSON file and serves the three calls the comment workflow makes, in the
shapes the real `gh` prints: a listing is served in pages of {page_size} comments, and `--paginate` prints
one JSON array per page back to back (`[...][...]`), or one array of pages with `--slurp`; every comment
carries its author (`user.login`), and a comment posted with the workflow's token is github-actions[bot]'s."""
import json, sys
from pathlib import Path
store = Path({store!r})
comments = json.loads(store.read_text()) if store.exists() else []
args = sys.argv[1:]
assert args[0] == "api", args
method = args[args.index("-X") + 1] if "-X" in args else "GET"
url = next(a for a in args[1:] if a.startswith("repos/")).split("?")[0]
body = None
if "-F" in args:
    field = args[args.index("-F") + 1]
    assert field.startswith("body=@"), field
    body = Path(field[len("body=@"):]).read_text()
parts = url.split("/")
if method == "GET" and parts[3:5] == ["issues", parts[4]] and parts[-1] == "comments":
    listed = [c for c in comments if c["issue"] == int(parts[4])]
    pages = [listed[i : i + {page_size}] for i in range(0, len(listed), {page_size})] or [[]]
    if "--paginate" not in args:
        pages = pages[:1]
    if "--slurp" in args:
        sys.stdout.write(json.dumps(pages))
    else:
        sys.stdout.write("".join(json.dumps(page) for page in pages))
    sys.stdout.write("\\n")
elif method == "POST" and parts[-1] == "comments":
    comments.append(
        {{"id": 1000 + len(comments), "issue": int(parts[4]), "body": body, "user": {{"login": "github-actions[bot]", "type": "Bot"}}}}
    )
elif method == "PATCH" and parts[3:5] == ["issues", "comments"]:
    next(c for c in comments if c["id"] == int(parts[5]))["body"] = body
else:
    sys.exit(f"FakeGitHubAPI: unsupported call {{method}} {{url}}")
store.write_text(json.dumps(comments))
'''


def fake_gh(bin_dir: Path, store: Path, page_size: int = 30) -> Path:
    """A `gh` on `bin_dir` serving the comments kept in `store`, `page_size` to a page (GitHub's default
    is 30)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable, store=str(store), page_size=page_size))
    gh.chmod(0o755)
    return gh


def comment(comment_id: int, issue: int, body: str, login: str) -> dict[str, Any]:
    """A stored comment as the REST API returns it (the fields the workflow reads)."""
    return {"id": comment_id, "issue": issue, "body": body, "user": {"login": login, "type": "User"}}
