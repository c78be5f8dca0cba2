"""A past commit's lock file read from git, without a checkout: `export --rev` writes that commit's
files (from the local store or the remote cache, verified), and `report --rev A --rev B` puts both
commits' measurements side by side. Two real commits of the digits spec: float, then quantized."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.gitops.conftest import apply_ok, commit_all, edit

QUANTIZED = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 40}
  evaluate:"""


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(repository, remote URL): v1 (float) applied, committed, tagged and pushed to a file remote;
    v2 (quantized) applied, committed and tagged."""
    root = tmp_path_factory.mktemp("revisions")
    repo = root / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    copy_digits(repo)
    spec = repo / "specs" / "digits.yaml"
    spec.write_text(DIGITS_SPEC.format(name="digits"))
    remote = f"file://{root / 'remote'}"
    apply_ok(repo)
    pushed = run_npuctl(repo, "push", "--remote", remote)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    commit_all(repo, "float")
    git(repo, "tag", "v1")
    edit(spec, "  evaluate:", QUANTIZED)
    apply_ok(repo)
    commit_all(repo, "quantized")
    git(repo, "tag", "v2")
    return repo, remote


def _lock(repo: Path, rev: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(git(repo, "show", f"{rev}:specs/digits.lock.json"))
    return data


def _compiled(lock: dict[str, Any]) -> dict[str, str]:
    arts = lock["variants"]["default"]["stages"]["compile"]["artifacts"]
    return {meta["file"]: meta["digest"] for meta in arts.values()}


def _written(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.iterdir()
        if p.name not in ("manifest.json", "SHA256SUMS")
    }


def test_export_rev_writes_the_files_of_that_commits_lock(
    two_releases: tuple[Path, str], tmp_path: Path
) -> None:
    repo, _ = two_releases
    old, new = _compiled(_lock(repo, "v1")), _compiled(_lock(repo, "v2"))
    assert old != new, "the two releases built different files"
    out = tmp_path / "v1"
    done = run_npuctl(repo, "export", "digits", str(out), "--rev", "v1")
    assert done.returncode == 0, done.stderr
    assert _written(out) == old
    assert (
        json.loads((out / "manifest.json").read_text())["variants"][0]["artifact"]["sha256"] in old.values()
    )
    assert git(repo, "status", "--porcelain") == "", "nothing checked out"


def test_export_rev_fetches_from_the_remote_cache_what_the_store_lacks(
    two_releases: tuple[Path, str], tmp_path: Path
) -> None:
    repo, remote = two_releases
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    without = run_npuctl(clone, "export", "digits", str(tmp_path / "none"), "--rev", "v1", "--remote", "none")
    assert without.returncode == 1
    assert "in neither the local store nor the remote cache" in without.stderr
    out = tmp_path / "fetched"
    done = run_npuctl(clone, "export", "specs/digits.yaml", str(out), "--rev", "v1", "--remote", remote)
    assert done.returncode == 0, done.stderr
    assert _written(out) == _compiled(_lock(repo, "v1"))
    shutil.rmtree(clone / ".npuctl", ignore_errors=True)


def test_export_rev_names_an_unknown_revision(two_releases: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = two_releases
    done = run_npuctl(repo, "export", "digits", str(tmp_path / "x"), "--rev", "v9")
    assert done.returncode == 1 and "unknown git revision 'v9'" in done.stderr


def test_report_of_two_revisions_shows_both_measurements(two_releases: tuple[Path, str]) -> None:
    repo, _ = two_releases
    done = run_npuctl(repo, "report", "digits", "--rev", "v1", "--rev", "v2", "--json")
    assert done.returncode == 0, done.stderr
    compared = json.loads(done.stdout)
    rows = {(r["variant"], r["name"]): r for r in compared["measurements"]}
    for rev, side in (("v1", "old"), ("v2", "new")):
        measured = _lock(repo, rev)["variants"]["default"]["measurements"]
        for name in ("latency_ms.p50", "latency_ms.p90", "latency_ms.p99", "accuracy", "size_mb"):
            assert rows[("default", name)][side] == pytest.approx(measured[name]["value"]), (rev, name)
        mean = measured["latency_ms.mean"]["value"]
        assert rows[("default", "throughput_fps")][side] == pytest.approx(1000 / mean)
    assert compared["old"].startswith("v1 (") and compared["new"].startswith("v2 (")
    assert compared["layers"], "both profiles are in the store: per-layer rows"
    assert all(r["old_ms"] is not None or r["new_ms"] is not None for r in compared["layers"])

    text = run_npuctl(repo, "report", "digits", "--base", "v1").stdout
    size = _lock(repo, "v1")["variants"]["default"]["measurements"]["size_mb"]["value"]
    assert "v1 (" in text and "working tree" in text and f"{size:.4g}" in text
