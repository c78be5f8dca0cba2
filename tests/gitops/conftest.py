"""Real git repositories with the digits model, committed, applied and edited like a pull request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import git, run_npuctl


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def npuctl_json(repo: Path, *args: str, codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    done = run_npuctl(repo, *args, "--json")
    assert done.returncode in codes, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def apply_ok(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_npuctl(repo, "apply", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def work_tree_state(repo: Path) -> tuple[str, bytes]:
    """`git status` and the index file: neither may change when a base ref is read."""
    status = git(repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all")
    index = (repo / ".git" / "index").read_bytes() if (repo / ".git" / "index").exists() else b""
    return status, index


def base_spec(payload: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in payload["base"]["specs"] if s["name"] == name)
