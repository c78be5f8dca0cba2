"""The QNN evaluate flags a run where one op takes most of the emulated cycles."""

from __future__ import annotations

from backends.qnn.evaluate import dominant_op


def test_an_op_over_half_the_cycles_is_flagged_with_its_share() -> None:
    per_op = {"QuantizeLinear_0": 1_970_000, "Conv_1": 20_000, "Conv_2": 10_000}
    found = dominant_op({"per_op": per_op})
    assert found == {"op": "QuantizeLinear_0", "cycles": 1_970_000, "share": round(1_970_000 / 2_000_000, 6)}


def test_an_even_profile_is_not_flagged() -> None:
    assert dominant_op({"per_op": {"a": 40, "b": 35, "c": 25}}) is None
    assert dominant_op({}) is None
