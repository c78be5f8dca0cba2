"""Every hostile case in one traced `npuctl apply` beside the valid digits spec, plus one validate of
the whole folder (text and JSON) read per case.

Per case: the validate verdict (what a `validate FILE` exits with: invalid for a spec error, valid when
only the input file's content is bad), one one-line error naming the file and the field (file:line:col
where the input is YAML), the stage that read a bad input file failed terminally and was not retried,
and, for the whole run, that the valid spec was built and that no file in the sandbox beside the
repository (nor /etc/passwd, /dev/zero, /proc/self/environ) was opened, and nothing outside the
repository was written (strace). Validating one file reads every spec beside it (their names must be
unique), so a validate per case read the folder 137 times; the duplicate-name case still validates
its file alone, since that sibling lookup is what it checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import DIGITS_SPEC, copy_digits, git
from tests.security.cases import CASES
from tests.security.corpus import Case, Ctx

pytestmark = pytest.mark.slow  # real builds in every test: minutes of the fast tier

FORBIDDEN = ("/etc/passwd", "/dev/zero", "/proc/self/environ")
"""Targets of the cases that must never be opened (/dev/urandom is one too, but the runtimes open it)."""
_CALL = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+|\?)")
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")


def _sandbox(outside: Path, repo: Path) -> None:
    outside.mkdir()
    shutil.copyfile(repo / "models" / "digits.onnx", outside / "secret.onnx")
    np.save(outside / "secret.npy", np.zeros((1, 1, 8, 8), np.float32))
    (outside / "secret.yaml").write_text(DIGITS_SPEC.format(name="secret"))
    (outside / "base.yaml").write_text("apiVersion: npuctl/v1\nkind: DeploymentBase\nspec: {target: cpu}\n")
    (outside / "labels.txt").write_text("secret.npy 1\n")
    (outside / "weights.bin").write_bytes(bytes(4096))
    (outside / "victim.json").write_text('{"victim": true}\n')
    (outside / "victim-hard.json").write_text('{"victim": "hard"}\n')
    os.mkfifo(outside / "pipe")


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


class Run:
    def __init__(self, repo: Path, outside: Path, code: int, payload: dict[str, Any], trace: str) -> None:
        self.repo, self.outside, self.code, self.trace = repo, outside, code, trace
        self.by_file = {Path(s["file"]).name: s for s in payload["specs"]}

    def entry(self, case: Case) -> dict[str, Any]:
        return self.by_file[f"h-{case.id}.yaml"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    base = tmp_path_factory.mktemp("hostile")
    repo = base / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=8, calib_samples=8)
    (repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    outside = base / "outside"
    _sandbox(outside, repo)
    before = _digests(outside)
    ctx = Ctx(repo, outside)
    for case in CASES:
        case.setup(ctx, f"h-{case.id}")
    trace = base / "trace.txt"
    argv = [sys.executable, "-I", "-m", "reconciler", "apply", "--json"]
    strace = ["strace", "-f", "-qq", "-s", "4096", "-e", "trace=%file", "-o", str(trace)]
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    done = subprocess.run([*strace, *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.stdout.strip(), done.stderr
    result = Run(repo, outside, done.returncode, json.loads(done.stdout), trace.read_text())
    assert _digests(outside) == before, "a file outside the repository changed"
    yield result
    for server in ctx.sockets:
        server.close()


def _calls(trace: str) -> Iterator[tuple[str, str, int]]:
    for line in trace.splitlines():
        match = _CALL.match(line)
        if match and match[4] != "?":
            yield match[2], match[3], int(match[4])


def _paths(args: str) -> list[str]:
    return re.findall(r'"((?:[^"\\]|\\.)*)"', args)


def test_the_valid_spec_beside_them_was_built(run: Run) -> None:
    assert run.code == 1  # hostile specs are errors
    digits = run.by_file["digits.yaml"]
    assert digits["health"] == "Healthy", [s.get("reason") for s in digits["stages"]]
    assert {s["name"]: s["action"] for s in digits["stages"]}["evaluate"] == "built"
    assert len(CASES) >= 100


def test_nothing_outside_was_opened_or_written(run: Run) -> None:
    outside, repo = str(run.outside), str(run.repo)
    opened, written = [], []
    calls = list(_calls(run.trace))
    model = str(run.repo / "models" / "digits.onnx")
    assert any(c in ("open", "openat") and model in a and rc >= 0 for c, a, rc in calls)  # the trace saw it
    for call, args, rc in calls:
        if rc < 0:
            continue
        paths = _paths(args)
        reaches = any(p.startswith(outside) or p in FORBIDDEN for p in paths)
        if reaches and call in ("open", "openat", "openat2", "creat", "execve"):
            opened.append((call, args))
        writes = call in ("creat", "mkdir", "rename", "renameat", "renameat2", "unlink", "unlinkat", "link")
        writes |= call in ("open", "openat") and any(flag in args for flag in _WRITE_FLAGS)
        if writes:
            for p in paths:
                absolute = os.path.isabs(p)
                if (
                    absolute
                    and not p.startswith(repo)
                    and not p.startswith(("/dev/null", "/dev/shm", "/dev/tty", "/proc/self/"))
                ) and "__pycache__" not in p:
                    written.append((call, p))
    assert opened == []
    assert written == []


@dataclass
class Validated:
    text: str
    """The text output (one line per error)."""
    specs: dict[str, dict[str, Any]]
    """validate --json's entry per spec file name."""
    lock_problems: list[str]


def _validate(repo: Path, *args: str) -> Any:
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        return CliRunner().invoke(_cli(), ["validate", *args], standalone_mode=False)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def validated(run: Run) -> Validated:
    text, as_json = _validate(run.repo, "specs"), _validate(run.repo, "--json", "specs")
    assert text.exception is None and as_json.exception is None, (text.exception, as_json.exception)
    payload = json.loads(as_json.output)
    specs = {Path(s["file"]).name: s for s in payload["specs"]}
    return Validated(text.output, specs, payload["lock_problems"])


def _validate_code(case: Case, stem: str, run: Run, validated: Validated) -> tuple[int, str]:
    """What `npuctl validate specs/<stem>.yaml` exits with, and its output."""
    if case.id == "s-twin-name":
        alone = _validate(run.repo, f"specs/{stem}.yaml")
        return (alone.return_value if alone.exception is None else 99), alone.output
    entry = validated.specs[f"{stem}.yaml"]
    own_locks = [p for p in validated.lock_problems if f"{stem}.lock.json" in p]
    located = {f"{e['file']}:{e['line']}:{e['column']}: " for e in entry["errors"]} | {f"{stem}.yaml: "}
    mine = [line for line in validated.text.splitlines() if any(where in line for where in located)]
    return (0 if entry["valid"] and not own_locks else 1), "\n".join(mine + own_locks)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, run: Run, validated: Validated) -> None:
    stem = f"h-{case.id}"
    entry = run.entry(case)
    validate_code, validate_output = _validate_code(case, stem, run, validated)
    if case.phase in ("spec", "file"):
        assert validate_code == 1, validate_output
        assert entry["status"] in ("Stalled", "Invalid") and entry["errors"], entry
        errors = [e for e in entry["errors"] if stem in e]
        assert errors, entry["errors"]
        first = errors[0]
        assert "\n" not in first and "internal error" not in first
        field = rf"{re.escape(case.field)}[^ ]*: " if case.field else ""
        where = r":\d+:\d+: " if case.phase == "spec" else r": "
        pattern = rf"{re.escape(stem)}[^:/]*\.yaml{where}{field}.*{re.escape(case.fragment)}"
        assert any(re.search(pattern, e) for e in errors), (pattern, errors)
        assert first.split(": ", 1)[0].split(":")[0] in validate_output
    elif case.phase == "build":
        assert validate_code == 0, validate_output
        failed = [s for s in entry["stages"] if s["action"] == "failed"]
        assert failed, entry
        reason = failed[0]["reason"]
        assert "\n" not in reason and "crashed" not in reason and case.fragment in reason, reason
        assert re.match(r"^(stalled: )?[a-z_.]+(\.[a-z_]+)*: ", reason) or ".onnx" in reason, reason
        log = failed[0].get("log")
        assert not log or not Path(log).exists() or "retrying" not in Path(log).read_text()
    else:
        assert validate_code == 0, validate_output
        assert entry["health"] == "Healthy", entry
        lock = run.repo / "specs" / f"{stem}.lock.json"
        if lock.exists():
            assert not lock.is_symlink()


def _cli() -> Any:
    from reconciler.cli import cli

    return cli
