"""A lock file read through the records and written back is byte-identical (the models are the lock
format, not an approximation of it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reconciler.records.lock import FORMAT_VERSION, LockFile
from reconciler.state import lockfile

ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((ROOT / "specs").glob("*.lock.json"))


def _round_trip(data: dict[str, Any]) -> str:
    return lockfile.dumps(LockFile.model_validate(data).dump())


@pytest.mark.parametrize("path", LOCKS, ids=[p.name for p in LOCKS])
def test_every_committed_lock_round_trips_byte_identical(path: Path) -> None:
    text = path.read_text()
    assert _round_trip(json.loads(text)) == text


def test_optional_fields_keep_their_presence_and_numbers_their_type() -> None:
    """What the committed locks may not show: other runners, a null verdicts_measured_on, a measurement
    with a host, no value or a key a backend added; an int stays an int and a float a float."""
    data = json.loads(LOCKS[0].read_text())
    variant = next(iter(data["variants"].values()))
    measurements = variant["measurements"]
    measurements["latency_ms.p50"] = {
        "value": 3,
        "evidence": "measured:host",
        "on_target": False,
        "host": "onnxruntime on x86",
        "samples": [1.0, 2],
    }
    measurements["size_mb"] = {"value": None, "evidence": "not measured", "verdict": "unverified"}
    variant["other_measurements"] = [
        {"runner": "ci", "measurements": {"accuracy": {"value": 1.0, "evidence": "x"}}}
    ]
    variant["verdicts_measured_on"] = None
    expected = lockfile.dumps(data)
    assert _round_trip(data) == expected
    dumped = LockFile.model_validate(data).dump()
    dumped_variant = next(iter(dumped["variants"].values()))
    assert type(dumped_variant["measurements"]["latency_ms.p50"]["value"]) is int
    assert dumped_variant["verdicts_measured_on"] is None
    assert "other_measurements" not in next(iter(json.loads(LOCKS[0].read_text())["variants"].values()))


def test_the_model_rejects_what_the_format_forbids() -> None:
    data = json.loads(LOCKS[0].read_text())
    assert data["format_version"] == FORMAT_VERSION
    for edit in (
        lambda d: d.update(format_version=FORMAT_VERSION - 1),
        lambda d: d.update(sync="Unknown"),  # a lock is written Synced or OutOfSync
        lambda d: next(iter(d["variants"].values())).update(typo=1),
        lambda d: next(iter(d["variants"].values()))["verdicts"][0].update(verdict="passed"),
    ):
        bad = json.loads(json.dumps(data))
        edit(bad)
        with pytest.raises(ValidationError):
            LockFile.model_validate(bad)
