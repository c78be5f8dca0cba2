"""Measurements name who measured (runner, device model and serial, CPU, interpreter) and their record."""

from __future__ import annotations

import hashlib
import json

from reconciler.engine.measurements import collect, runner_identity
from reconciler.state.db import Record

DEVICE = {
    "cpu": "Cortex-A76",
    "cpus": 8,
    "machine": "aarch64",
    "system": "Linux",
    "python": "3.11.2",
    "executable": "/opt/py/bin/python3",
    "model": "Radxa ROCK 5B",
    "serial": "a1b2c3",
}


def test_a_remote_runner_names_the_device_and_its_interpreter() -> None:
    identity = runner_identity({"runner": "ssh://pi@board:22", "device": DEVICE})
    assert identity == (
        "ssh://pi@board:22; model Radxa ROCK 5B; serial a1b2c3; Cortex-A76 x8; Linux aarch64; "
        "python 3.11.2 (/opt/py/bin/python3)"
    )
    local = runner_identity({"runner": "local", "device": {**DEVICE, "model": None, "serial": None}})
    assert local == "local; Cortex-A76 x8; Linux aarch64; python 3.11.2", "no venv path in a committed lock"


def test_collected_measurements_carry_their_record_and_digest() -> None:
    report = {
        "runner": "ssh://pi@board:22",
        "device": DEVICE,
        "measurements": {"latency_ms.p90": {"value": 1.5, "evidence": "measured:device", "detail": "d"}},
    }
    record = Record("e" * 64, "evaluate", {}, {}, report, "e" * 64, "")
    [(name, measured)] = collect({"evaluate": record}).items()
    assert measured["record"] == "e" * 64 and measured["runner"].startswith("ssh://pi@board:22; model")
    signed = {k: measured.get(k) for k in ("record", "value", "evidence", "detail", "runner")}
    text = json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert measured["digest"] == hashlib.sha256(text.encode()).hexdigest()
    assert (
        collect(
            {"evaluate": Record("e" * 64, "evaluate", {}, {}, {"measurements": {name: measured}}, "", "")}
        )[name]
        == measured
    ), "a measurement read back from a lock keeps its recorded digest"


def test_a_measurement_carried_into_a_record_of_a_new_key_names_that_record() -> None:
    """A stage rebuilt under a new key to the same outputs keeps its report, lock-read measurements
    included: each names the record it now belongs to, with its digest over that name, so the lock
    never holds a measurement of a record it no longer has."""
    old = {"value": 0.9, "evidence": "estimated: op table", "detail": "d", "record": "a" * 64, "digest": "x"}
    record = Record("b" * 64, "check", {}, {}, {"measurements": {"npu_coverage": old}}, "", "")
    measured = collect({"check": record})["npu_coverage"]
    assert measured["record"] == "b" * 64 and measured["value"] == 0.9
    signed = {k: measured.get(k) for k in ("record", "value", "evidence", "detail", "runner")}
    text = json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert measured["digest"] == hashlib.sha256(text.encode()).hexdigest()


def test_a_lock_read_record_keeps_the_measurements_of_the_records_it_names() -> None:
    """Read from a lock, evaluate's record carries every measurement of its variant, each naming the
    record that made it: those that name a record the variant holds stay as recorded."""
    check = {"value": 0.5, "evidence": "estimated", "detail": "d", "record": "c" * 64, "digest": "kept"}
    records = {
        "check": Record("c" * 64, "check", {}, {}, {}, "", ""),
        "evaluate": Record("e" * 64, "evaluate", {}, {}, {"measurements": {"npu_coverage": check}}, "", ""),
    }
    assert collect(records)["npu_coverage"] == check
