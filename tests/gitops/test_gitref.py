"""Reading a commit's specs and lock files through GitPython, without touching the work tree or index."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.gitops.gitref import GitError, blob_text, open_repo, repo_relative, resolve, snapshot
from tests.gitops.conftest import commit_all, edit, work_tree_state


def test_snapshot_holds_the_refs_yaml_and_lock_blobs_only(digits_repo: Path) -> None:
    (digits_repo / "specs" / "bases").mkdir()
    (digits_repo / "specs" / "bases" / "b.yaml").write_text("kind: DeploymentBase\n")
    (digits_repo / "specs" / "digits.lock.json").write_text('{"spec": "digits"}\n')
    first = commit_all(digits_repo, "first")
    edit(digits_repo / "specs" / "digits.yaml", "runs: 5", "runs: 9")
    (digits_repo / "specs" / "new.yaml").write_text("kind: Deployment\n")
    before = work_tree_state(digits_repo)
    repo = open_repo(digits_repo)
    try:
        with snapshot(repo, "HEAD") as snap:
            assert snap.commit == first
            files = sorted(str(p.relative_to(snap.root)) for p in snap.root.rglob("*") if p.is_file())
            assert files == ["specs/bases/b.yaml", "specs/digits.lock.json", "specs/digits.yaml"]
            assert "runs: 5" in snap.path("specs/digits.yaml").read_text()
            assert (
                snap.display(f"{snap.root}/specs/digits.yaml:3:1: bad") == "HEAD:specs/digits.yaml:3:1: bad"
            )
            root = snap.root
        assert not root.exists(), "the snapshot folder is removed on exit"
        assert blob_text(resolve(repo, "HEAD"), "specs/digits.yaml") is not None
        assert blob_text(resolve(repo, "HEAD"), "specs/missing.yaml") is None
    finally:
        repo.close()
    assert work_tree_state(digits_repo) == before
    assert "runs: 9" in (digits_repo / "specs" / "digits.yaml").read_text()


def test_bad_refs_and_non_repositories_are_one_line_errors(digits_repo: Path, tmp_path: Path) -> None:
    commit_all(digits_repo, "first")
    repo = open_repo(digits_repo)
    try:
        with pytest.raises(GitError, match="unknown git revision 'origin/nope'"):
            resolve(repo, "origin/nope")
        with pytest.raises(GitError, match="unknown git revision"):
            snapshot(repo, "HEAD~5")
    finally:
        repo.close()
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match="not a git repository"):
        open_repo(plain)


def test_repo_relative_rejects_paths_outside(digits_repo: Path, tmp_path: Path) -> None:
    assert repo_relative(digits_repo / "specs" / "x.yaml", digits_repo) == Path("specs/x.yaml")
    with pytest.raises(GitError, match="outside the repository"):
        repo_relative(tmp_path, digits_repo)
