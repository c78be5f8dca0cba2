"""Which differences between a committed stage and this machine's key inputs make it another machine's
build of the same thing (reconciler.engine.resolve.machine_moves)."""

from __future__ import annotations

import copy
from typing import Any

from reconciler.engine.resolve import machine_moves

RECORDED: dict[str, Any] = {
    "stage": "compile",
    "impl": {
        "name": "backends.onnxruntime._compile.CompilePass",
        "version": "2",
        "fingerprint": {"onnxruntime": "1.32.0", "host_isa": "x86_64-avx2", "host_int8_dot": "saturating"},
    },
    "fields": {"compile": {"cores": None, "options": {}}, "target": "cpu"},
    "files": {"eval_data": "ab" * 32},
    "upstream": {"model": "cd" * 32},
    "target": {"id": "cpu", "precisions": ["fp32", "int8"]},
}


def _here(**fingerprint: str) -> dict[str, Any]:
    current = copy.deepcopy(RECORDED)
    current["impl"]["fingerprint"].update(fingerprint)
    current["target"]["precisions"] = ("fp32", "int8")  # as the catalog holds it: a tuple
    return current


def test_only_host_facts_differ_names_each_move() -> None:
    moves = machine_moves(RECORDED, _here(host_isa="x86_64-avx512f", host_int8_dot="exact"))
    assert moves == ["host_int8_dot saturating -> exact", "host_isa x86_64-avx2 -> x86_64-avx512f"]


def test_a_host_fact_this_machine_adds_is_a_move() -> None:
    assert machine_moves(RECORDED, _here(host_kernel="6.18")) == ["host_kernel None -> 6.18"]


def test_any_other_difference_is_a_rebuild() -> None:
    assert machine_moves(RECORDED, _here(host_isa="aarch64", onnxruntime="1.33.0")) == []
    changed = _here(host_isa="aarch64")
    changed["upstream"]["model"] = "ef" * 32
    assert machine_moves(RECORDED, changed) == []
    changed = _here(host_isa="aarch64")
    changed["fields"]["compile"]["cores"] = 2
    assert machine_moves(RECORDED, changed) == []


def test_the_same_inputs_or_no_record_move_nothing() -> None:
    assert machine_moves(RECORDED, _here()) == []
    assert machine_moves({}, _here(host_isa="aarch64")) == []
