"""The ETA of a long stage: the median of the same stage's recent durations in the ledger, its own
spec's first, else the same stage on the same target; none without history or for a short stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli._common import eta_text
from reconciler.engine import eta
from reconciler.engine.eta import Past
from reconciler.state.db import Database, Record


def test_no_previous_duration_no_estimate() -> None:
    assert eta.estimate([], "a", "default", "compile", "cpu") is None
    other = [Past("b", "default", "compile", "rk3588", 30.0)]
    assert eta.estimate(other, "a", "default", "compile", "cpu") is None, "another target says nothing"


def test_own_history_first_then_the_same_stage_on_the_same_target() -> None:
    history = [
        Past("b", "default", "compile", "cpu", 100.0),
        Past("a", "default", "compile", "cpu", 10.0),
        Past("a", "default", "compile", "cpu", 12.0),
        Past("a", "default", "compile", "cpu", 50.0),
    ]
    assert eta.estimate(history, "a", "default", "compile", "cpu") == 12.0, "median of its own"
    assert eta.estimate(history, "c", "default", "compile", "cpu") == pytest.approx(31.0)
    recent = [Past("a", "default", "quantize", "cpu", s) for s in (900, 1, 2, 3, 4, 5)]
    assert eta.estimate(recent, "a", "default", "quantize", "cpu") == 3, "only the last RECENT count"


def test_remaining_counts_down_and_skips_short_stages() -> None:
    assert eta.remaining(60.0, 15.0) == 45.0
    assert eta.remaining(60.0, 75.0) == 0.0
    assert eta.remaining(eta.LONG_S - 1, 0.0) is None
    assert eta.remaining(None, 0.0) is None
    assert eta_text(45.0) == "~45 s left" and eta_text(600.0) == "~10 min left" and eta_text(None) == ""


def test_history_reads_the_ledger_with_each_keys_target(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    inputs = {"stage": "compile", "target": {"id": "rk3588"}}
    db.put_record(Record("k1", "compile", inputs, {}, {}, "d", ""))
    db.log_attempt("s", "default", "compile", "k1", "built", duration_ms=20_000)
    db.log_attempt("s", "default", "compile", "k1", "failed", duration_ms=1_000)
    db.log_attempt("s", "default", "import", "k0", "built", duration_ms=500)
    past = eta.history(db)
    assert past == [
        Past("s", "default", "compile", "rk3588", 20.0),
        Past("s", "default", "import", "", 0.5),
    ]
    estimator = eta.Estimator(past, {"t": "rk3588"})
    assert estimator.start("t", "default", "compile") == 20.0
    left = estimator.left("t", "default", "compile")
    assert left is not None and 19.0 < left <= 20.0
    assert estimator.start("t", "default", "import") is None
