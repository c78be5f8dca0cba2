"""npu_coverage over the ML Program's operations: only what the package holds is counted."""

from __future__ import annotations

from backends.catalog import op_table, targets
from backends.coreml.program import EVIDENCE, MIL_TO_ONNX, absent, coverage


def test_coverage_counts_the_programs_operations_by_their_onnx_rows() -> None:
    ops = {"conv": 53, "add": 20, "mul": 27, "clip": 18, "sigmoid_hard": 9, "reduce_mean": 10, "made_up": 1}
    table = op_table(targets()["apple-ane"].op_table)
    on = sum(
        n
        for op, n in ops.items()
        if op in MIL_TO_ONNX and (row := table.lookup(MIL_TO_ONNX[op])) is not None and row.supported != "no"
    )
    found = coverage(ops, targets()["apple-ane"])
    assert found["evidence"] == EVIDENCE
    assert found["value"] == round(on / sum(ops.values()), 6) and on < sum(ops.values())
    assert "made_up x1 (no ONNX counterpart named)" in found["detail"]


def test_onnx_operators_the_package_does_not_hold_are_named() -> None:
    onnx_ops = {"Conv": 53, "BatchNormalization": 35, "Flatten": 1, "Constant": 300, "Add": 20}
    assert absent(onnx_ops, {"conv": 53, "add": 20, "reshape": 1}) == {"BatchNormalization": 35, "Flatten": 1}
