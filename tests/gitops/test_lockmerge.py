"""The three-way lock merge on a real lock file npuctl wrote (the repository's own digits-cpu lock): each
record whole from the side that changed it, a record changed on both sides left to a rebuild, and the
result consistent under the lock's integrity checks."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from reconciler.engine import integrity
from reconciler.gitops.lockmerge import merge
from reconciler.state import lockfile

ROOT = Path(__file__).resolve().parents[2]
REAL = json.loads((ROOT / "specs" / "digits-cpu.lock.json").read_text())


def _signed(lock: dict[str, Any], stage: str, signature: str) -> dict[str, Any]:
    """`lock` with one stage record carrying a field the merge knows nothing of (a signature)."""
    out = copy.deepcopy(lock)
    out["variants"]["default"]["stages"][stage]["signature"] = signature
    return out


def _stage_text(lock: dict[str, Any], stage: str) -> str:
    return lockfile.dumps(lock["variants"]["default"]["stages"][stage])


def test_records_changed_on_one_side_each_are_kept_whole() -> None:
    ours, theirs = _signed(REAL, "compile", "by-ours"), _signed(REAL, "check", "by-theirs")
    merged = merge(REAL, ours, theirs)
    assert merged.dropped == []
    assert _stage_text(merged.lock, "compile") == _stage_text(ours, "compile")
    assert _stage_text(merged.lock, "check") == _stage_text(theirs, "check")
    assert merged.lock["variants"]["default"]["measurements"] == REAL["variants"]["default"]["measurements"]
    assert integrity.problems(merged.lock, Path("x.lock.json")) == []
    assert merged.lock["health"] == REAL["health"]


def test_a_stage_changed_on_both_sides_is_dropped_with_what_it_measured() -> None:
    ours, theirs = _signed(REAL, "evaluate", "by-ours"), _signed(REAL, "evaluate", "by-theirs")
    theirs["variants"]["default"]["stages"]["check"]["signature"] = "by-theirs"
    merged = merge(REAL, ours, theirs)
    variant = merged.lock["variants"]["default"]
    evaluate_key = REAL["variants"]["default"]["stages"]["evaluate"]["key"]
    assert "evaluate" not in variant["stages"] and "default/evaluate: changed on both sides" in merged.dropped
    assert _stage_text(merged.lock, "check") == _stage_text(theirs, "check")
    expected_gone = {
        name
        for name, m in REAL["variants"]["default"]["measurements"].items()
        if m.get("record") == evaluate_key
    }
    assert expected_gone and not expected_gone & set(variant["measurements"])
    assert set(variant["measurements"]) == set(REAL["variants"]["default"]["measurements"]) - expected_gone
    assert integrity.problems(merged.lock, Path("x.lock.json")) == []
    assert merged.lock["sync"] == "OutOfSync" and merged.lock["health"] != "Healthy"


def test_a_measurement_changed_on_both_sides_drops_the_stage_that_measured_it() -> None:
    ours, theirs = copy.deepcopy(REAL), copy.deepcopy(REAL)
    ours["variants"]["default"]["measurements"]["size_mb"]["runner"] = "ours"
    theirs["variants"]["default"]["measurements"]["size_mb"]["runner"] = "theirs"
    record = REAL["variants"]["default"]["measurements"]["size_mb"]["record"]
    producer = next(n for n, s in REAL["variants"]["default"]["stages"].items() if s["key"] == record)
    merged = merge(REAL, ours, theirs)
    assert producer not in merged.lock["variants"]["default"]["stages"]
    assert "size_mb" not in merged.lock["variants"]["default"]["measurements"]
    assert any(line.startswith(f"default/{producer}:") for line in merged.dropped)


def test_the_same_change_on_both_sides_is_one_change() -> None:
    ours = _signed(REAL, "compile", "same")
    merged = merge(REAL, ours, copy.deepcopy(ours))
    assert merged.dropped == [] and merged.lock["variants"] == ours["variants"]
