"""The main job: `npuctl apply` on the repository's own specs, in a copy of the repository."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, git


@pytest.mark.slow
def test_apply_on_the_repository_specs_exits_0_or_3_naming_the_slo(tmp_path: Path, npuctl) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for folder in ("specs", "examples", "schemas"):
        shutil.copytree(ROOT / folder, repo / folder)
    for lock in (repo / "specs").glob("*.lock.json"):
        lock.unlink()
    done = npuctl(repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads(done.stdout)
    jsonschema.validate(payload, json.loads((ROOT / "schemas" / "apply.schema.json").read_text()))
    assert {s["status"] for s in payload["specs"]} == {"Ready"}
    open_slos = [v for s in payload["specs"] for v in s["slo"] if v["passed"] is not True]
    assert (done.returncode == 3) == bool(open_slos), "exit 3 exactly when an SLO is failed or unverified"
    text = npuctl(repo, "plan")
    assert text.returncode == 0, "a second look finds nothing to do"
    for verdict in open_slos:
        assert verdict["verdict"] in ("fail", "fail (estimated)", "met on estimate", "unverified")
    lock_schema = json.loads((ROOT / "schemas" / "lock.schema.json").read_text())
    for lock in (repo / "specs").glob("*.lock.json"):
        jsonschema.validate(json.loads(lock.read_text()), lock_schema)
