"""`apply --locked` (reconciler.engine.locked): a committed lock file that apply would change fails the
run with exit 2, naming it, and nothing is built or written; a lock that holds passes as a plain apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, run_npuctl
from tests.gitops.conftest import commit_all, edit

LOCK = "specs/digits.lock.json"


@pytest.fixture
def clone(digits_repo: Path, tmp_path: Path) -> Path:
    """A fresh clone (no .npuctl) of a repository whose digits lock is applied and committed."""
    done = run_npuctl(digits_repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    commit_all(digits_repo, "digits applied")
    fresh = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(digits_repo), str(fresh))
    return fresh


def _untouched(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def test_a_lock_that_holds_passes_on_a_fresh_clone_building_nothing(clone: Path) -> None:
    done = run_npuctl(clone, "apply", "--locked")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Synced, Healthy" in done.stdout and " built" not in done.stderr
    assert _untouched(clone) == ""


def test_an_slo_edit_without_its_lock_exits_2_naming_the_lock_and_writes_nothing(clone: Path) -> None:
    edit(clone / "specs" / "digits.yaml", "p90: 1000", "p90: 150")
    before = (clone / LOCK).read_bytes()
    done = run_npuctl(clone, "apply", "--locked", env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"npuctl apply --locked: {LOCK} would change: default/verify would rejudge: "
        "spec.slo.latency_ms.p90: 1000.0 -> 150.0" in done.stderr
    )
    assert f"::error file={LOCK},title=npuctl%3A digits::the committed lock file would change" in done.stderr
    assert "1 lock file(s) would change; nothing was built or written" in done.stdout
    assert (clone / LOCK).read_bytes() == before
    assert _untouched(clone) == " M specs/digits.yaml\n"
    assert run_npuctl(clone, "apply").returncode == 0, "a plain apply then re-locks it"
    assert json.loads((clone / LOCK).read_text())["slo"]["latency_ms"]["p90"] == 150


def test_a_key_change_names_the_first_stage_to_build_and_builds_nothing(clone: Path) -> None:
    edit(clone / "specs" / "digits.yaml", "runs: 5", "runs: 6")
    done = run_npuctl(clone, "apply", "--locked", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    [spec] = json.loads(done.stdout)["specs"]
    assert spec["status"] == "OutOfSync" and spec["stages"] == []
    assert spec["errors"] == [
        f"{LOCK} would change: default/evaluate would build: spec.evaluate.runs: 5 -> 6"
    ]
    assert not (clone / ".npuctl" / "store").exists() or not any(
        (clone / ".npuctl" / "store").rglob("*.onnx")
    )


def test_the_refusal_is_valid_apply_json(clone: Path) -> None:
    from reconciler.records.results import ApplyOutput

    edit(clone / "specs" / "digits.yaml", "runs: 5", "runs: 6")
    done = run_npuctl(clone, "apply", "--locked", "--json")
    ApplyOutput.model_validate(json.loads(done.stdout))


def test_a_spec_with_no_committed_lock_is_named(clone: Path) -> None:
    text = (clone / "specs" / "digits.yaml").read_text().replace("name: digits", "name: other")
    (clone / "specs" / "other.yaml").write_text(text)
    done = run_npuctl(clone, "apply", "--locked", "--format", "markdown")
    assert done.returncode == 2
    assert "specs/other.lock.json would change: no lock file is committed for this spec" in done.stdout
    assert "digits.lock.json" not in done.stdout, "only the locks that would change are named"
    assert not (clone / "specs" / "other.lock.json").exists()


def test_locked_and_remeasure_exclude_each_other(clone: Path) -> None:
    done = run_npuctl(clone, "apply", "--locked", "--remeasure")
    assert done.returncode == 1 and "exclude each other" in done.stderr, "a usage error, not a stale lock"


def test_an_invalid_spec_beside_a_stale_lock_is_an_error(clone: Path) -> None:
    edit(clone / "specs" / "digits.yaml", "p90: 1000", "p90: 150")
    text = (clone / "specs" / "digits.yaml").read_text().replace("name: digits", "name: broken")
    (clone / "specs" / "broken.yaml").write_text(text.replace("runs: 5", "runs: -1"))
    done = run_npuctl(clone, "apply", "--locked")
    assert done.returncode == 1, "an error outranks a stale lock"
    assert f"{LOCK} would change" in done.stdout and "spec.evaluate.runs" in done.stdout
