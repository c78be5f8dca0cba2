"""Store objects are verified by digest before use: a flipped byte is caught, quarantined, rebuilt, and
never spreads into a later stage; `npuctl fsck` finds what the cheap check cannot see and repairs it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_npuctl


def _store_object(repo: Path, digest: str) -> Path:
    return repo / ".npuctl" / "store" / digest[:2] / digest[2:]


def _flip(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    path.chmod(0o444)
    if keep_mtime:  # bit rot: the content changes, the metadata does not
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _stage_digest(lock: dict, stage: str) -> str:
    artifacts = lock["variants"]["default"]["stages"][stage]["artifacts"]
    return next(iter(artifacts.values()))["digest"]


@pytest.fixture
def applied(built_repo: Path) -> Path:
    return built_repo


def test_flipped_byte_is_caught_and_never_spreads(applied: Path) -> None:
    """The compiled artifact is corrupted, then a change makes evaluate rebuild: evaluate must measure
    a freshly rebuilt artifact (same digest: builds are reproducible), never the corrupt bytes."""
    lock_path = applied / "specs" / "a.lock.json"
    digest = _stage_digest(json.loads(lock_path.read_text()), "compile")
    obj = _store_object(applied, digest)
    _flip(obj)
    spec = applied / "specs" / "a.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 6"))

    done = run_npuctl(applied, "apply", "--json")
    assert done.returncode == 0, done.stderr
    stages = {
        s["name"]: s for s in next(x for x in json.loads(done.stdout)["specs"] if x["name"] == "a")["stages"]
    }
    assert stages["compile"]["action"] == "built"
    assert "corrupt" in stages["compile"]["reason"]
    assert stages["evaluate"]["action"] == "built"
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest  # the store holds the good bytes again
    quarantined = list((applied / ".npuctl" / "corrupt").iterdir())
    assert [p.name.split(".")[0] for p in quarantined] == [digest]
    assert _stage_digest(json.loads(lock_path.read_text()), "compile") == digest


def test_a_corrupt_object_nothing_needs_is_quarantined_and_the_lock_kept(applied: Path) -> None:
    lock_path = applied / "specs" / "a.lock.json"
    lock_before = lock_path.read_bytes()
    digest = _stage_digest(json.loads(lock_before), "import")
    obj = _store_object(applied, digest)
    _flip(obj)
    done = run_npuctl(applied, "apply", "--json")
    assert done.returncode == 0, done.stderr
    assert not obj.exists()  # moved aside: no later run or process can build from it
    assert [p.name.split(".")[0] for p in (applied / ".npuctl" / "corrupt").iterdir()] == [digest]
    assert lock_path.read_bytes() == lock_before
    repair = run_npuctl(applied, "fsck", "--json")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest


def test_fsck_finds_bit_rot_and_repairs_by_rebuilding(applied: Path) -> None:
    lock_path = applied / "specs" / "a.lock.json"
    lock_before = lock_path.read_bytes()
    digest = _stage_digest(json.loads(lock_before), "compile")
    _flip(_store_object(applied, digest), keep_mtime=True)

    check = run_npuctl(applied, "fsck", "--check-only", "--json")
    assert check.returncode == 1, check.stdout
    assert json.loads(check.stdout)["corrupt"] == [digest]

    repair = run_npuctl(applied, "fsck", "--json")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    result = json.loads(repair.stdout)
    assert result["corrupt"] == [digest] and result["ok"] is True
    assert "compile" in result["rebuilt"]
    obj = _store_object(applied, digest)
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest

    again = run_npuctl(applied, "fsck", "--check-only", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["corrupt"] == []
    assert lock_path.read_bytes() == lock_before
