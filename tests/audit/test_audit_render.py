"""Audit output for humans: a verdict as its value against its bound, a commit by its subject only."""

from __future__ import annotations

from datetime import datetime, timezone

from backends.sdk.vocab import Verdict
from reconciler.audit.entries import AuditEntry
from reconciler.audit.query import Audit, Filters
from reconciler.audit.render import to_markdown, verdict_cell
from reconciler.output import number
from reconciler.records.judged import Judged

P90 = 217.252352


def _verdict() -> Judged:
    return Judged.from_json(
        {
            "name": "latency_ms.p90",
            "variant": "default",
            "threshold": 150.0,
            "comparison": "<=",
            "value": P90,
            "passed": False,
            "evidence": "measured:device",
            "verdict": Verdict.FAIL.word,
        }
    )


def test_a_failed_verdict_reads_value_relation_threshold_and_unit() -> None:
    assert verdict_cell(_verdict()) == f"{Verdict.FAIL.mark} {number(P90)} > 150 ms (measured:device)"


def test_a_commit_shows_its_subject_line_cut_to_a_line() -> None:
    subject = "settled cache: the racy window is measured " + "from the moment the specs were read " * 6
    entry = AuditEntry(
        source="commit",
        label="abc1234def",
        time=datetime(2026, 1, 1, tzinfo=timezone.utc),
        spec="det",
        target="cpu",
        lock_file="specs/det.lock.json",
        status="Degraded",
        model_version="v1",
        model_digest=None,
        model_file_digest=None,
        import_key=None,
        verdicts=[_verdict()],
        subject=subject,
    )
    md = to_markdown(Audit([entry], Filters()))
    row = next(line for line in md.splitlines() if "abc1234def" in line and line.startswith("| 2026"))
    assert subject not in md and subject[:40] in row and "…" in row
    assert f"{number(P90)} > 150 ms" in row
