"""The shared words: the sentence an int8 build slower than its float model gets."""

from __future__ import annotations

from backends.sdk.vocab import FLOAT_MEAN, slower_than_float


def _measured(int8_ms: float, float_ms: float | None) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {"latency_ms.mean": {"value": int8_ms, "evidence": "measured:host"}}
    if float_ms is not None:
        found[FLOAT_MEAN] = {"value": float_ms, "evidence": "measured:host"}
    return found


def test_an_int8_build_above_its_float_mean_is_named_with_both_numbers() -> None:
    said = slower_than_float(_measured(0.0189, 0.0099))
    assert said is not None and "slower than the float model" in said
    assert f"{0.0189:.4f} ms" in said and f"{0.0099:.4f} ms float" in said


def test_a_faster_or_equal_build_or_one_without_a_float_timing_says_nothing() -> None:
    assert slower_than_float(_measured(0.42, 4.31)) is None
    assert slower_than_float(_measured(1.0, 1.0)) is None
    assert slower_than_float(_measured(1.0, None)) is None
