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
    _same_keys_same_outputs(repo)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads(done.stdout)
    jsonschema.validate(payload, json.loads((ROOT / "schemas" / "apply.schema.json").read_text()))
    assert {s["sync"] for s in payload["specs"]} == {"Synced"}
    for spec in payload["specs"]:
        if any(v["passed"] is not True for v in spec["slo"]):
            assert spec["health"] != "Healthy" and spec["status"] != "Healthy", spec["name"]
    failing = [
        v for s in payload["specs"] for v in s["slo"] if v["passed"] is False or v["verdict"] == "unverified"
    ]
    assert (done.returncode == 3) == bool(failing), "exit 3 exactly when an SLO failed or has no evidence"
    open_slos = [v for s in payload["specs"] for v in s["slo"] if v["passed"] is not True]
    text = npuctl(repo, "plan")
    assert text.returncode == 0, "a second look finds nothing to do"
    for verdict in open_slos:
        assert verdict["verdict"] in (
            "fail",
            "fail (estimated)",
            "met on estimate",
            "met on host CPU",
            "missed on host CPU",
            "unknown",
            "unverified",
        )
    lock_schema = json.loads((ROOT / "schemas" / "lock.schema.json").read_text())
    for lock in (repo / "specs").glob("*.lock.json"):
        jsonschema.validate(json.loads(lock.read_text()), lock_schema)


def _same_keys_same_outputs(rebuilt: Path) -> None:
    """A stage rebuilt from scratch under a key the committed lock records must give the artifacts that
    lock records: otherwise the lock is stale, the stage is not deterministic, or its output changed
    without a version bump (and every machine that rebuilds it re-runs everything after it for nothing).
    Evaluate is left out: its artifacts are measurements."""
    differ = []
    for lock in sorted((rebuilt / "specs").glob("*.lock.json")):
        committed = json.loads((ROOT / "specs" / lock.name).read_text())["variants"]
        fresh = json.loads(lock.read_text())["variants"]
        for variant, entry in fresh.items():
            for stage, record in entry["stages"].items():
                old = committed.get(variant, {}).get("stages", {}).get(stage)
                if stage == "evaluate" or old is None or old["key"] != record["key"]:
                    continue
                digests = {name: a["digest"] for name, a in record["artifacts"].items()}
                if digests != {name: a["digest"] for name, a in old["artifacts"].items()}:
                    differ.append(f"{lock.name} {variant}/{stage} key {record['key'][:12]}")
    assert not differ, f"same key, other artifacts than the committed lock records: {differ}"


def _copy_with_locks(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    for folder in ("specs", "examples", "schemas"):
        shutil.copytree(ROOT / folder, repo / folder)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a fresh clone of the repository")
    return repo


@pytest.mark.slow
def test_a_machine_without_rknn_or_openvino_keeps_every_committed_lock(tmp_path: Path, npuctl) -> None:
    """The quick start on a fresh clone where neither toolchain is installed (simulated with
    NPUCTL_ABSENT_TOOLCHAINS, which every toolchain check answers as "missing"): nothing is lost."""
    developer = _copy_with_locks(tmp_path)
    done = npuctl(developer, "apply")  # with the toolchains: a no-op while the committed locks are current
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    git(developer, "add", "-A")
    git(developer, "commit", "-q", "--allow-empty", "-m", "applied where the toolchains are")
    repo = tmp_path / "fresh-clone"
    git(tmp_path, "clone", "-q", str(developer), str(repo))
    locks = {p.name: p.read_bytes() for p in (repo / "specs").glob("*.lock.json")}
    assert len(locks) >= 5
    absent = {"NPUCTL_ABSENT_TOOLCHAINS": "openvino,rknn"}
    done = npuctl(repo, "apply", "--json", env=absent)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in (repo / "specs").glob("*.lock.json")} == locks
    assert git(repo, "status", "--porcelain") == ""
    payload = json.loads(done.stdout)
    failing = [v for s in payload["specs"] for v in s["slo"] if v["passed"] is False]
    assert (done.returncode == 3) == bool(failing), "carried-over evidence is not a failure; a failed SLO is"
    status = npuctl(repo, "status", "--json", env=absent)
    rows = {r["name"]: r for r in json.loads(status.stdout)["specs"]}
    jsonschema.validate(
        json.loads(status.stdout), json.loads((ROOT / "schemas" / "status.schema.json").read_text())
    )
    for name in ("digits-intel-npu", "ppocr-rec-rk3588"):
        row = rows[name]
        assert row["carried_over"], name
        assert all(
            "not re-verified on this machine: toolchain not installed" in c for c in row["carried_over"]
        )
        assert row["sync"] == "Synced", "the committed build is of this very spec"
        assert all(v.get("carried_over") is True for v in row["verdicts"]), name
        assert "carried over" in row["reason"]
    # ONNX Runtime is here: nothing carried for want of it (a lock built on a machine of another
    # kind, another vector ISA, is carried as such: tests/e2e/test_machine_kind.py)
    assert not [c for c in rows["digits-cpu"]["carried_over"] if "toolchain not installed" in c]
    assert all("machine of another kind" in c for c in rows["digits-cpu"]["carried_over"])
    text = npuctl(repo, "status", env=absent)
    assert "carried over" in text.stdout
