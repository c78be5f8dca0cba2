"""`npuctl key sign-locks`: signs what stands, never launders what does not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.engine.relock import sign_locks
from reconciler.trust.keys import SigningKey
from reconciler.trust.policy import Policy
from reconciler.trust.signing import Trust
from tests.conftest import ROOT


def _trust() -> Trust:
    return Trust(Policy(), SigningKey(Ed25519PrivateKey.generate(), "made for this test"))


def _unsigned_copy(tmp_path: Path) -> Path:
    """The repository's own digits-cpu lock (a real apply's), its signatures removed."""
    path = tmp_path / "digits-cpu.lock.json"
    shutil.copyfile(ROOT / "specs" / "digits-cpu.lock.json", path)
    lock = json.loads(path.read_text())
    for stage in lock["variants"]["default"]["stages"].values():
        stage.pop("signed", None)
    path.write_text(json.dumps(lock))
    return path


def test_unsigned_records_are_signed_only_when_adopted(tmp_path: Path) -> None:
    path, trust = _unsigned_copy(tmp_path), _trust()
    lines, whole = sign_locks(trust, [path], adopt_unsigned=False)
    assert not whole and "0 record(s) signed" in lines[0] and "(unsigned)" in lines[0]
    lines, whole = sign_locks(trust, [path], adopt_unsigned=True)
    assert whole and "7 record(s) signed" in lines[0]
    variant = json.loads(path.read_text())["variants"]["default"]
    assert trust.distrusted(variant) == {}
    assert _trust().distrusted(variant).keys() == variant["stages"].keys(), "another machine trusts none"


def test_a_record_signed_by_a_stranger_or_a_tampered_lock_is_left_alone(tmp_path: Path) -> None:
    path, stranger = _unsigned_copy(tmp_path), _trust()
    sign_locks(stranger, [path], adopt_unsigned=True)
    before = path.read_bytes()
    lines, whole = sign_locks(_trust(), [path], adopt_unsigned=True)
    assert not whole and "a key the trust policy does not name" in lines[0] and path.read_bytes() == before
    lock = json.loads(path.read_text())
    lock["variants"]["default"]["measurements"]["accuracy"]["value"] = 0.995
    path.write_text(json.dumps(lock))
    lines, whole = sign_locks(stranger, [path], adopt_unsigned=True)
    assert not whole and "not signed" in lines[0] and "does not match its digest" in lines[0]
