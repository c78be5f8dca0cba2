"""The HTML page for humans: figures to a few digits, an SLO against its bound, a commit by its subject,
a placement view with fit and zoom."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from backends.sdk.vocab import NODES_THAT_RUN, Verdict
from reconciler.audit.entries import AuditEntry
from reconciler.output import number
from reconciler.records.judged import Judged
from reconciler.report.data import Placement, ReportData
from reconciler.report.render import html

TIMED_P50 = 157.88300950000001
P90 = 217.252352
SUBJECT = "settled cache: the racy window is measured " + "from the moment the specs were read " * 6


def _page() -> str:
    verdict = Judged.from_json(
        {
            "name": "latency_ms.p90",
            "variant": "default",
            "threshold": 150.0,
            "comparison": "<=",
            "value": P90,
            "passed": False,
            "evidence": "measured:device",
            "verdict": Verdict.FAIL.word,
            "detail": "",
        }
    )
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
        verdicts=[verdict],
        subject=SUBJECT,
    )
    nodes = [{"name": f"n{i}", "op_type": "Conv", "device": "NPU", "partition": 0} for i in range(3)]
    coverage = {
        "nodes": {"npu": 3, "total": 3, "fraction": 1.0},
        "macs": {"npu": 0, "total": 0, "fraction": None},
    }
    profile = {
        "runtime": "onnxruntime",
        "evidence": "measured:host",
        "how": "profiled",
        "runs": 5,
        "latency_ms": {"timed_p50": TIMED_P50, "profiled_p50": None},
        "attribution": {
            "layers_sum_ms": 101.23456789,
            "timed_cpu_ms": None,
            "shares": {},
            "utilisation_peak": "the roofline",
            "utilisation_estimate": None,
            "top": [],
        },
        "layers": [],
        "suggestions": [],
    }
    data = ReportData(
        spec="det",
        target="cpu",
        file="specs/det.yaml",
        status="Degraded",
        sync="Synced",
        model_version="v1",
        model_digest=None,
        generated="2026-01-01 00:00",
        revision=None,
        verdicts=[verdict],
        placement=Placement({"nodes": nodes, "coverage": coverage}, [("n0", "n1"), ("n1", "n2")], "check"),
        profile=profile,
        history=[entry],
    )
    return html(data)


def test_figures_are_shown_to_significant_digits() -> None:
    page = _page()
    assert f"timed p50 {number(TIMED_P50)} ms" in page and str(TIMED_P50) not in page
    assert f"Layers sum {number(101.23456789)} ms" in page


def _text(page: str) -> str:
    """The page without its scripts (the charts' data keep the figures as recorded)."""
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def test_a_failed_slo_reads_value_relation_threshold_and_unit() -> None:
    page = _text(_page())
    assert f"{number(P90)} &gt; 150 ms" in page and str(P90) not in page


def test_the_history_shows_a_commits_subject_cut_to_a_line() -> None:
    page = _page()
    assert page.count(SUBJECT) == 1, "the whole subject only in the cell's title (on hover)"
    assert f'title="{SUBJECT}"' in page and SUBJECT[:40] in page.replace(f'title="{SUBJECT}"', "")


def test_the_placement_view_fits_its_frame_and_zooms() -> None:
    page = _page()
    assert '<div class="graph fit">' in page and 'data-zoom="fit"' in page and 'data-zoom="1"' in page
    assert f"3/3 {NODES_THAT_RUN}" in page
