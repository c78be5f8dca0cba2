"""The words and numbers every human-readable format shares (reconciler.output)."""

from __future__ import annotations

import pytest

from reconciler.engine.verify import SLACK
from reconciler.output import IDENTITY, NONE, action_word, measured_against, number, shorten, unit


def test_a_figure_is_shown_to_four_significant_digits() -> None:
    value = 157.88300950000001  # a timing as the lock records it
    assert number(value) == f"{round(value, 1)}"
    assert number(0.12370001) == "0.1237"
    assert number(150.0) == "150" and number(3) == "3"
    assert number(12345.6) == str(round(12345.6)), "no exponent for a large figure"
    assert number(None) == NONE


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("latency_ms.p90", "ms"),
        ("size_mb", "MB"),
        ("peak_memory_mb", "MB"),
        ("accuracy.min", ""),
        ("npu_coverage", ""),
    ],
)
def test_the_unit_is_read_from_the_slo_name(name: str, expected: str) -> None:
    assert unit(name) == expected


def test_a_missed_bound_reads_as_the_relation_that_holds() -> None:
    value, threshold = 217.252352, 150.0
    assert value > threshold
    assert measured_against("latency_ms.p90", value, "<=", threshold) == f"{number(value)} > 150 ms"
    assert measured_against("accuracy.min", 0.9, ">=", 0.95) == "0.9 < 0.95"


def test_a_met_bound_keeps_its_own_relation_within_the_judges_slack() -> None:
    assert measured_against("size_mb", 6.969, "<=", 12) == "6.969 <= 12 MB"
    assert measured_against("accuracy.max_drop", 0.01 + SLACK / 2, "<=", 0.01) == "0.01 <= 0.01"
    assert measured_against("latency_ms.p90", None, "<=", 150.0) == "no value (<= 150 ms)"


def test_an_identity_stage_reads_as_identity_only_where_it_would_build() -> None:
    assert action_word("build", identity=True) == IDENTITY
    assert action_word("built", identity=True) == IDENTITY
    assert action_word("cached", identity=True) == "cached"
    assert action_word("build", identity=False) == "build"


def test_a_long_text_is_cut_to_its_first_line() -> None:
    subject = "settled cache: " + "x" * 200
    message = f"{subject}\n\nthe body, which a table cell never shows"
    cut = shorten(message, 72)
    assert len(cut) == 72 and cut.endswith("…") and subject.startswith(cut[:-1])
    assert shorten("short\nbody") == "short"
