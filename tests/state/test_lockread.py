"""A committed lock read through the typed view: what it gives back to the engine is what it read, so a
lock rewritten from it (apply on another machine, a carried-over variant) stays byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.engine.lockwrite import carried_entry, stage_entry
from reconciler.state import lockread
from reconciler.trust import policy
from reconciler.trust.signing import Trust

ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((ROOT / "specs").glob("*.lock.json"))
TRUST = Trust(policy.read(ROOT))
"""The repository's trust policy, without this machine's key."""


@pytest.mark.parametrize("path", LOCKS, ids=[p.name for p in LOCKS])
def test_a_stage_read_from_a_lock_is_written_back_as_committed(path: Path) -> None:
    data = json.loads(path.read_text())
    lock = lockread.read(path)
    assert lock is not None and lock.raw == data
    for name, variant in lock.variants.items():
        committed = data["variants"][name]
        assert set(variant.stages) == set(committed["stages"])
        entries = {}
        for stage in variant.stages:
            record = variant.record(stage)
            assert record is not None and lockread.is_lock_record(record)
            entries[stage] = stage_entry(record)
        # signed as apply signs them: the committed signatures (by the key the policy names) are kept
        signed = TRUST.signed_stages(
            entries,
            committed["measurements"],
            committed["stages"],
            fresh=False,
            declared=committed.get("artifact_inputs"),
        )
        assert signed == committed["stages"]
        verdicts = [v.lock_json() for v in variant.verdicts]
        assert carried_entry(variant, verdicts) == committed
        evaluate = variant.record("evaluate")
        assert evaluate is not None and evaluate.report["measurements"] == committed["measurements"]


def test_the_index_finds_a_key_recorded_by_any_spec() -> None:
    index = lockread.LockIndex()
    for path in LOCKS:
        index.add(lockread.read(path))
    data = json.loads(LOCKS[-1].read_text())
    key = data["variants"]["default"]["stages"]["import"]["key"]
    found = index.record(key)
    assert found is not None and found.key == key and found.stage == "import"
    assert index.record("0" * 64) is None


def test_no_lock_and_a_malformed_one_read_as_nothing_recorded(tmp_path: Path) -> None:
    assert lockread.read(tmp_path / "absent.lock.json") is None
    assert lockread.variant(None, "default").stages == {}
    odd = lockread.view({"variants": {"default": "not an object", "b": {"stages": [], "measurements": 3}}})
    assert odd is not None and list(odd.variants) == ["b"]
    assert (odd.variants["b"].stages, odd.variants["b"].measurements, odd.verdicts) == ({}, {}, [])
