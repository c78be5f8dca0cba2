"""audit on real git as CI and developers have it: a depth-1 clone, amended history, another branch,
rows per quantization setting, failed attempts from the ledger. The real digits model, really applied."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.gitops.conftest import commit_all, edit

pytestmark = pytest.mark.slow  # real builds in every test: minutes of the fast tier

PTQ = """\
  quantization:
    mode: ptq
    activations: {activations}
    calibration: {{data: ../data/calib, samples: 40}}
  evaluate:"""


def _audit(repo: Path, *args: str, code: int = 0) -> dict[str, Any]:
    done = run_npuctl(repo, "audit", "--json", *args)
    assert done.returncode == code, done.stdout + done.stderr
    payload: dict[str, Any] = json.loads(done.stdout) if code == 0 else {}
    return payload


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(bare origin, developer clone): one model applied unquantized, then with uint8 and int8
    activations; three commits, each with its lock file, pushed."""
    root = tmp_path_factory.mktemp("audit-git")
    bare = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    dev = root / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    copy_digits(dev)
    spec = dev / "specs" / "digits.yaml"
    spec.write_text(DIGITS_SPEC.format(name="digits"))
    for activations in (None, "uint8", "int8"):
        if activations is not None:
            text = DIGITS_SPEC.format(name="digits").replace(
                "  evaluate:", PTQ.format(activations=activations)
            )
            spec.write_text(text)
        done = run_npuctl(dev, "apply")
        assert done.returncode == 0, done.stdout + done.stderr
        commit_all(dev, f"digits quantization {activations or 'none'}")
    git(dev, "remote", "add", "origin", str(bare))
    git(dev, "push", "-q", "origin", "main")
    return bare, dev


def test_rows_are_keyed_by_model_version_and_quantization(origin: tuple[Path, Path]) -> None:
    _, dev = origin
    payload = _audit(dev)
    rows = [r for r in payload["summary"] if r["spec"] == "digits"]
    assert len(rows) == 3, "three quantization settings of one model are three rows"
    assert len({r["model"] for r in rows}) == 1
    settings = sorted(r["settings"]["quantization"] for r in rows)
    assert settings[0] == "none"
    assert settings[1].startswith("ptq int8/int8 #") and settings[2].startswith("ptq int8/uint8 #")
    text = run_npuctl(dev, "audit").stdout
    assert "ptq int8/uint8" in text and "ptq int8/int8" in text


def test_a_depth_1_clone_says_what_history_it_holds_and_how_to_deepen_it(
    origin: tuple[Path, Path], tmp_path: Path
) -> None:
    bare, _ = origin
    ci = tmp_path / "ci"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{bare}", str(ci)], check=True)
    payload = _audit(ci)
    [entry] = payload["entries"]
    assert entry["subject"] == "digits quantization int8"
    [note] = payload["warnings"]
    assert "shallow clone: history holds 1 commit(s)" in note
    assert "`git fetch --unshallow origin`" in note and "`git fetch --deepen=100 origin`" in note
    text = run_npuctl(ci, "audit")
    assert text.returncode == 0 and "git fetch --unshallow origin" in text.stdout
    git(ci, "fetch", "-q", "--unshallow", "origin")
    deepened = _audit(ci)
    assert len(deepened["entries"]) == 3 and deepened["warnings"] == []


def test_audit_after_an_amend_and_on_another_branch(origin: tuple[Path, Path], tmp_path: Path) -> None:
    _, template = origin
    dev = tmp_path / "dev"
    shutil.copytree(template, dev, symlinks=True)
    first = git(dev, "rev-list", "--max-parents=0", "HEAD").strip()
    git(dev, "branch", "first", first)
    git(dev, "commit", "-q", "--amend", "-m", "digits int8 activations (amended)")
    payload = _audit(dev)
    commits = [e for e in payload["entries"] if e["source"] == "commit"]
    assert commits[0]["subject"] == "digits int8 activations (amended)"
    assert len(commits) == 3
    assert commits[0]["applied_at"], "the local apply still matches the rewritten commit by its results"
    on_branch = _audit(dev, "--rev", "first")
    assert [e["commit"] for e in on_branch["entries"] if e["source"] == "commit"] == [first]
    done = run_npuctl(dev, "audit", "--rev", "origin/nosuch")
    assert done.returncode == 1 and "`git fetch origin nosuch`" in done.stderr


def test_a_failed_attempt_is_in_the_ledger_and_the_audit(origin: tuple[Path, Path], tmp_path: Path) -> None:
    _, template = origin
    dev = tmp_path / "dev"
    shutil.copytree(template, dev, symlinks=True)
    edit(dev / "specs" / "digits.yaml", "samples: 40", "samples: 400")
    assert run_npuctl(dev, "apply").returncode == 1
    payload = _audit(dev)
    [failed] = [e for e in payload["entries"] if e["attempt"]]
    assert failed["state"] == "fail" and failed["attempt"].startswith("failed: quantize [default]: ")
    assert "400" in failed["attempt"]
    assert len([r for r in payload["summary"] if r["spec"] == "digits"]) == 3, "an attempt is not a row"
