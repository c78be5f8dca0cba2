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
def applied(digits_repo: Path) -> Path:
    done = run_npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 0, done.stderr
    return digits_repo


def test_flipped_byte_is_caught_and_rebuilt_under_the_same_digest(applied: Path) -> None:
    lock_path = applied / "specs" / "digits.lock.json"
    lock_before = lock_path.read_bytes()
    digest = _stage_digest(json.loads(lock_before), "import")
    obj = _store_object(applied, digest)
    _flip(obj)
    assert hashlib.sha256(obj.read_bytes()).hexdigest() != digest

    done = run_npuctl(applied, "apply", "--json")
    assert done.returncode == 0, done.stderr
    stages = {s["name"]: s for s in json.loads(done.stdout)["specs"][0]["stages"]}
    assert stages["import"]["action"] == "built"
    assert "corrupt" in stages["import"]["reason"]
    assert stages["compile"]["action"] == "cached"  # early cutoff: the rebuilt import is byte-identical
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest  # the store holds the good bytes again
    quarantined = list((applied / ".npuctl" / "corrupt").iterdir())
    assert [p.name.split(".")[0] for p in quarantined] == [digest]
    assert lock_path.read_bytes() == lock_before  # nothing built from the corrupt object, nothing changed


def test_fsck_finds_bit_rot_and_repairs_by_rebuilding(applied: Path) -> None:
    lock_path = applied / "specs" / "digits.lock.json"
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
