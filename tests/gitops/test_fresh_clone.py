"""Plan on a fresh CI checkout equals plan on the developer's clone: the lock files are the truth that
travels. A real bare origin, a developer clone that applies and pushes, and a `git clone --depth 1`
standing in for CI (no `.npuctl/`, no store)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.gitops.conftest import commit_all, edit

QUANTIZED = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 40}
  evaluate:"""


@pytest.fixture(scope="module")
def developer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(origin, developer clone): the digits spec applied, committed with its lock and pushed."""
    root = tmp_path_factory.mktemp("fresh-clone")
    origin = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(origin))
    dev = root / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    copy_digits(dev)
    (dev / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    done = run_npuctl(dev, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    commit_all(dev, "digits applied")
    git(dev, "remote", "add", "origin", str(origin))
    git(dev, "push", "-q", "origin", "main")
    git(dev, "fetch", "-q", "origin")
    return origin, dev


def _plan(repo: Path, *args: str, codes: tuple[int, ...] = (2,)) -> tuple[int, dict[str, Any]]:
    done = run_npuctl(repo, "plan", "--base", "origin/main", "--json", *args)
    assert done.returncode in codes, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(done.stdout)


def _view(payload: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on the clone: actions, keys, reasons of the work to do, predicted verdicts."""
    specs = {}
    for spec in payload["specs"]:
        stages = [
            (
                s["name"],
                s["variant"],
                s["action"],
                s.get("key"),
                "" if s["action"] == "cached" else s["reason"],
            )
            for s in spec["stages"]
        ]
        verdicts = [(v["name"], v["verdict"], v.get("predicted")) for v in spec["slo"]]
        specs[spec["name"]] = (spec["status"], spec["sync"], spec["health"], stages, verdicts)
    base = [(s["name"], s["change"], s["rebuild"]) for s in payload["base"]["specs"]]
    return {"specs": specs, "base": base}


def _pull_request(origin: Path, dev_template: Path, tmp: Path, branch: str, change: Any) -> tuple[Path, Path]:
    dev = tmp / "dev"
    shutil.copytree(dev_template, dev, symlinks=True)
    git(dev, "checkout", "-q", "-b", branch)
    change(dev)
    commit_all(dev, f"pr: {branch}")
    git(dev, "push", "-q", "origin", branch)
    ci = tmp / "ci"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", "--branch", branch, f"file://{origin}", str(ci)], check=True
    )
    git(ci, "fetch", "-q", "--depth", "1", "origin", "main:refs/remotes/origin/main")
    assert not (ci / ".npuctl").exists()
    return dev, ci


def _tighten_slo(dev: Path) -> None:
    edit(dev / "specs" / "digits.yaml", "p90: 1000", "p90: 0.0001")


def _quantize(dev: Path) -> None:
    edit(dev / "specs" / "digits.yaml", "  evaluate:", QUANTIZED)


def _add_spec(dev: Path) -> None:
    text = DIGITS_SPEC.format(name="digits-int8").replace("  evaluate:", QUANTIZED)
    (dev / "specs" / "digits-int8.yaml").write_text(text)


def test_an_slo_only_change_rejudges_and_predicts_the_verdict(developer, tmp_path: Path) -> None:
    origin, template = developer
    dev, ci = _pull_request(origin, template, tmp_path, "slo", _tighten_slo)
    _, on_dev = _plan(dev)
    _, on_ci = _plan(ci)
    assert _view(on_ci) == _view(on_dev)
    [spec] = on_ci["specs"]
    assert {s["name"]: s["action"] for s in spec["stages"]}["verify"] == "rejudge"
    assert all(s["action"] == "cached" for s in spec["stages"] if s["name"] != "verify")
    p90 = next(v for v in spec["slo"] if v["name"] == "latency_ms.p90")
    assert (p90["threshold"], p90["verdict"], p90["predicted"]) == (0.0001, "fail", "pass -> fail")
    assert spec["health"] == "Degraded" and spec["status"] != "Healthy"
    code, _ = _plan(ci, "--fail-on-regression", codes=(3,))
    assert code == 3
    markdown = run_npuctl(ci, "plan", "--format", "markdown")
    assert "pass -> fail" in markdown.stdout


def test_a_quantization_change_rebuilds_from_quantize_on_either_clone(developer, tmp_path: Path) -> None:
    origin, template = developer
    dev, ci = _pull_request(origin, template, tmp_path, "quant", _quantize)
    _, on_dev = _plan(dev)
    _, on_ci = _plan(ci)
    assert _view(on_ci) == _view(on_dev)
    actions = {s["name"]: s["action"] for s in on_ci["specs"][0]["stages"]}
    assert actions["import"] == "cached"
    assert actions["quantize"] == actions["compile"] == actions["evaluate"] == "build"
    quantize = next(s for s in on_ci["specs"][0]["stages"] if s["name"] == "quantize")
    assert "spec.quantization.mode: none -> ptq" in quantize["reason"]
    explained = [json.loads(run_npuctl(r, "explain", "digits", "--json").stdout)["stages"] for r in (dev, ci)]
    without_note = [[{k: v for k, v in s.items() if k != "note"} for s in side] for side in explained]
    assert without_note[0] == without_note[1], "explain reads the lock too: the same answer on either clone"
    by_stage = {s["stage"]: s for s in explained[1]}
    assert by_stage["import"]["up_to_date"] is True and by_stage["quantize"]["up_to_date"] is False


def test_an_added_spec_plans_the_same_on_either_clone(developer, tmp_path: Path) -> None:
    origin, template = developer
    dev, ci = _pull_request(origin, template, tmp_path, "added", _add_spec)
    _, on_dev = _plan(dev)
    _, on_ci = _plan(ci)
    assert _view(on_ci) == _view(on_dev)
    by_name = {s["name"]: s for s in on_ci["specs"]}
    assert all(s["action"] == "cached" for s in by_name["digits"]["stages"])
    added = {s["name"]: s["action"] for s in by_name["digits-int8"]["stages"]}
    assert added["import"] == "cached", "the same model's import is recorded in digits' lock"
    assert added["quantize"] == "build"
    assert dict((n, c) for n, c, _ in _view(on_ci)["base"])["digits-int8"] == "added"
