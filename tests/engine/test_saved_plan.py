"""`plan -out FILE` then `apply FILE` on the real digits spec: apply builds what the plan said, and a
plan whose spec, lock file or inputs changed since is refused with one line naming the change."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import numpy as np

from tests.conftest import git

Npuctl = Callable[..., CompletedProcess[str]]


def _planned(repo: Path, npuctl: Npuctl, plan_file: Path) -> dict[tuple[str, str], tuple[str, str | None]]:
    done = npuctl(repo, "plan", "-out", str(plan_file), "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    shown = json.loads(done.stdout)["specs"][0]["stages"]
    saved = json.loads(plan_file.read_text())
    assert saved["kind"] == "npuctl-plan"
    stages = {(s["variant"], s["stage"]): (s["action"], s["key"]) for s in saved["specs"][0]["stages"]}
    assert stages == {(s["variant"], s["name"]): (s["action"], s.get("key")) for s in shown}
    return stages


def test_apply_of_a_saved_plan_builds_what_it_planned(digits_repo: Path, npuctl: Npuctl) -> None:
    git(digits_repo, "add", "-A")
    git(digits_repo, "commit", "-qm", "spec")
    plan_file = digits_repo / "out.plan"
    planned = _planned(digits_repo, npuctl, plan_file)
    applied = npuctl(digits_repo, "apply", str(plan_file), "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    built = {(s["variant"], s["name"]): s for s in json.loads(applied.stdout)["specs"][0]["stages"]}
    for (variant, stage), (action, key) in planned.items():
        if action == "build" and key is not None:
            assert built[(variant, stage)]["key"] == key, f"{stage} built under the planned key"
            assert built[(variant, stage)]["action"] == "built"
    assert (digits_repo / "specs" / "digits.lock.json").is_file()


def test_a_stale_saved_plan_is_refused_naming_what_changed(digits_repo: Path, npuctl: Npuctl) -> None:
    plan_file = digits_repo / "out.plan"
    _planned(digits_repo, npuctl, plan_file)
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 900"))
    refused = npuctl(digits_repo, "apply", str(plan_file))
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "specs/digits.yaml: slo.latency_ms.p90 changed: 1000.0 -> 900.0" in lines[0], (
        refused.stderr
    )
    assert not (digits_repo / "specs" / "digits.lock.json").exists(), "nothing was applied"

    _planned(digits_repo, npuctl, plan_file)
    sample = sorted((digits_repo / "data" / "eval").glob("*.npy"))[0]
    np.save(sample, np.load(sample) + 1)
    refused = npuctl(digits_repo, "apply", str(plan_file))
    assert refused.returncode == 1
    assert "input eval_data (default) changed" in refused.stderr, refused.stderr

    _planned(digits_repo, npuctl, plan_file)
    (digits_repo / "specs" / "digits.lock.json").write_text("{}\n")
    refused = npuctl(digits_repo, "apply", str(plan_file))
    assert refused.returncode == 1
    assert "specs/digits.lock.json: the lock file changed" in refused.stderr, refused.stderr
