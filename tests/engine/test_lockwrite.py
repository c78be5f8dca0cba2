from __future__ import annotations

import pytest
from pydantic import ValidationError

from reconciler.engine.lockwrite import checked, stage_entry
from reconciler.state.db import Record

KEY = "ab" * 32


def _record(note: str = "built", **artifact: object) -> Record:
    inputs = {"stage": "compile", "impl": {"name": "ort", "version": "1", "fingerprint": "f"}}
    return Record(
        KEY,
        "compile",
        inputs,
        {"model": {"digest": "cd" * 32, "file": "m.onnx", "size": 7, **artifact}},
        {},
        KEY,
        note,
    )


def test_a_stage_entry_records_key_artifacts_implementation_and_inputs() -> None:
    entry = stage_entry(_record())
    assert entry == {
        "key": KEY,
        "artifacts": {"model": {"digest": "cd" * 32, "file": "m.onnx", "size": 7}},
        "identity": False,
        "impl": {"name": "ort", "version": "1", "fingerprint": "f"},
        "inputs": _record().key_inputs,
    }
    assert stage_entry(_record("identity: passed through"))["identity"] is True


def test_an_artifact_the_lock_format_cannot_hold_fails_before_it_is_written() -> None:
    def lock(record: Record) -> dict[str, object]:
        return {"variants": {"default": {"stages": {"compile": stage_entry(record)}}}}

    assert checked(lock(_record())) == lock(_record())
    with pytest.raises(ValidationError):
        checked(lock(_record(extra="x")))
    with pytest.raises(ValidationError):
        checked(lock(_record(size=-1)))
