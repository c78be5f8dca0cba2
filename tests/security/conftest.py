"""One repository with two built digits specs (`a`, `b`), built once per session and copied per test:
the fault and integrity tests start from a real build without paying for it each time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl


@pytest.fixture(scope="session")
def built_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("built") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=6, calib_samples=0)
    (repo / "specs" / "a.yaml").write_text(DIGITS_SPEC.format(name="a"))
    (repo / "specs" / "b.yaml").write_text(DIGITS_SPEC.format(name="b").replace("runs: 5", "runs: 4"))
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "built")
    return repo


@pytest.fixture
def built_repo(built_template: Path, tmp_path: Path) -> Path:
    """A private copy of the built repository (git history, lock files, .npuctl state)."""
    repo = tmp_path / "repo"
    shutil.copytree(built_template, repo, symlinks=True)
    return repo
