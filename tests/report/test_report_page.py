"""`npuctl report` on real applies: a self-contained page with every section, and graceful gaps."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import git, run_npuctl


def _report(repo: Path, spec: str, out: Path) -> str:
    done = run_npuctl(repo, "report", spec, "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == str(out)
    return out.read_text()


def test_the_page_is_self_contained_with_every_section(report_repo: Path, tmp_path: Path) -> None:
    html = _report(report_repo, "digits-auto", tmp_path / "auto.html")
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", html), "no external resources"
    assert "Plotly.newPlot" in html and len(html) > 1_000_000, "plotly.js is inlined"
    for div in ('id="placement"', 'id="latency"', 'id="sensitivity"', 'id="history"'):
        assert div in html, div
    assert "digits-auto → cpu" in html and "quantization <code>ptq</code>" in html
    assert "/conv1/Conv" in html and "top1_agreement" in html
    assert html.count("digits v1") == 1 and "digits v2" in html, "history rows name their commits"
    assert "latency_ms.p90" in html and "measured:host" in html


def test_a_spec_path_works_and_float_specs_say_why_there_is_no_sensitivity(
    report_repo: Path, tmp_path: Path
) -> None:
    html = _report(report_repo, "specs/digits.yaml", tmp_path / "float.html")
    assert 'id="sensitivity"' not in html
    assert "quantization.mode is none: nothing was quantized" in html


def test_default_output_is_under_the_state_folder(report_repo: Path) -> None:
    done = run_npuctl(report_repo, "report", "digits")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == report_repo / ".npuctl" / "reports" / "digits.html"


def test_a_clone_without_local_state_still_reports_slos_and_history(
    report_repo: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(report_repo), str(clone))
    done = run_npuctl(clone, "report", "digits", "-o", str(tmp_path / "clone.html"))
    assert done.returncode == 0, done.stderr
    assert "no stage records in the local state" in done.stderr
    html = (tmp_path / "clone.html").read_text()
    assert 'id="history"' in html and 'id="placement"' not in html
    assert "No placement recorded" in html and "No raw latency samples" in html


def test_unknown_and_unapplied_specs_exit_1(report_repo: Path, tmp_path: Path) -> None:
    done = run_npuctl(report_repo, "report", "nope")
    assert done.returncode == 1 and "no spec file or spec named 'nope'" in done.stderr
    fresh = report_repo / "specs" / "fresh.yaml"
    fresh.write_text(
        (report_repo / "specs" / "digits.yaml").read_text().replace("name: digits", "name: fresh")
    )
    try:
        done = run_npuctl(report_repo, "report", "fresh")
        assert done.returncode == 1 and "run `npuctl apply` first" in done.stderr
    finally:
        fresh.unlink()
