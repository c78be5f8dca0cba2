"""The typed views readers get (records.measured, records.judged, state.lockread) hold the same fields
as the pydantic records that validate what is written: a field renamed in one and not the other fails
here, and every committed lock reads the same through both."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from reconciler.records.judged import Judged
from reconciler.records.lock import ArtifactInput, LockFile, LockVariant, ModelRef, OtherRunner, Sources
from reconciler.records.measured import Measured
from reconciler.records.measurement import Measurement
from reconciler.records.stage import Artifact, Signature, StageRecord
from reconciler.records.verdict import VerdictRecord
from reconciler.state import lockread

ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((ROOT / "specs").glob("*.lock.json"))

PAIRS: list[tuple[type[Any], type[BaseModel], set[str]]] = [
    (Measured, Measurement, set()),
    (Judged, VerdictRecord, set()),
    (lockread.LockedArtifact, Artifact, set()),
    (lockread.LockedStage, StageRecord, {"name"}),
    (lockread.OtherRunner, OtherRunner, {"raw"}),
    (lockread.LockedInput, ArtifactInput, {"raw"}),
    (lockread.LockedVariant, LockVariant, {"name", "raw", "distrusted"}),
    (lockread.LockedSignature, Signature, set()),
    (lockread.LockedModel, ModelRef, set()),
    (lockread.LockedSources, Sources, set()),
    (lockread.LockView, LockFile, {"raw"}),
]
"""(view, record, the view's own fields beyond the record's)."""


@pytest.mark.parametrize("view, record, own", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_a_view_has_exactly_its_records_fields(
    view: type[Any], record: type[BaseModel], own: set[str]
) -> None:
    names = {f.name for f in dataclasses.fields(view)}
    assert names - own == set(record.model_fields)


def _same(view: object, record: BaseModel, path: str) -> None:
    """Every field the record holds equals the view's attribute of that name, recursively."""
    for name in sorted(record.model_fields_set):
        got, want = getattr(view, name), getattr(record, name)
        where = f"{path}.{name}"
        if isinstance(want, BaseModel):
            _same(got, want, where)
        elif isinstance(want, dict) and want and isinstance(next(iter(want.values())), BaseModel):
            assert set(got) == set(want), where
            for key in want:
                _same(got[key], want[key], f"{where}.{key}")
        elif isinstance(want, list) and want and isinstance(want[0], BaseModel):
            assert len(got) == len(want), where
            for index, (g, w) in enumerate(zip(got, want, strict=True)):
                _same(g, w, f"{where}[{index}]")
        else:
            assert got == want and type(got) is type(want), where


@pytest.mark.parametrize("path", LOCKS, ids=[p.name for p in LOCKS])
def test_every_committed_lock_reads_the_same_through_the_view_and_the_record(path: Path) -> None:
    data = json.loads(path.read_text())
    view = lockread.view(data)
    assert view is not None and view.raw is data
    _same(view, LockFile.model_validate(data), path.name)


def test_a_verdict_read_back_is_written_as_it_was_read() -> None:
    for path in LOCKS:
        for variant in json.loads(path.read_text())["variants"].values():
            for verdict in variant["verdicts"]:
                assert Judged.from_json(verdict).lock_json() == verdict


def test_a_field_of_the_wrong_type_reads_as_absent() -> None:
    measured = Measured.from_json({"value": "3", "evidence": 7, "on_target": "no", "runner": "ci"})
    assert (measured.value, measured.evidence, measured.on_target, measured.runner) == (None, "", None, "ci")
    assert Measured.from_json({"value": True, "evidence": "measured:host"}).value is None
    assert (
        lockread.variants({"variants": {"a": {"stages": {"x": {"key": 3}}, "verdicts": [1]}}})["a"].stages
        == {}
    )
