"""Terminal output: verdict colours on a terminal only, and a progress bar that shows where a spec stopped."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli._common import ProgressReporter
from reconciler.cli._render import colour
from reconciler.engine.results import SpecResult, StageResult
from tests.conftest import run_npuctl


def test_verdict_words_are_coloured_and_nothing_else() -> None:
    line = colour("  accuracy.min  default  >= 0.5  0.97  pass  measured:host (bypass passed)")
    assert click.style("pass", fg="green", bold=False) in line
    assert click.unstyle(line).count("pass") == 3 and line.count("\x1b[0m") == 1, "whole words only"
    bad = colour("d -> cpu: Stalled, Degraded; latency fail (estimated)")
    assert click.style("Stalled", fg="red", bold=True) in bad
    assert click.style("fail (estimated)", fg="red", bold=True) in bad
    assert click.unstyle(bad) == "d -> cpu: Stalled, Degraded; latency fail (estimated)", "alignment is kept"


def test_piped_output_carries_no_escape_codes(digits_repo: Path) -> None:
    done = run_npuctl(digits_repo, "apply")
    assert done.returncode == 0 and "\x1b[" not in done.stdout + done.stderr


def test_a_stalled_spec_keeps_its_bar_where_it_stopped() -> None:
    reporter = ProgressReporter()
    reporter.spec_started("stuck", 7)
    reporter.spec_started("fine", 7)
    for name in ("import", "check", "rewrite"):
        reporter.stage_finished("stuck", StageResult(name, "default", "built", None, ""))
    reporter.spec_finished(SpecResult("stuck", "specs/stuck.yaml", "cpu", status="Stalled"))
    reporter.spec_finished(SpecResult("fine", "specs/fine.yaml", "cpu", status="Healthy"))
    stuck, fine = (reporter.progress.tasks[reporter.tasks[n]] for n in ("stuck", "fine"))
    assert (stuck.completed, stuck.total) == (3, 7) and "[red]Stalled" in stuck.fields["stage"]
    assert fine.completed == fine.total == 7 and "[green]Healthy" in fine.fields["stage"]


def test_piped_tables_end_where_their_text_ends(digits_repo: Path) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    for command in ("status", "audit"):
        done = run_npuctl(digits_repo, command)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines and not [line for line in lines if line != line.rstrip()], command


def test_the_progress_line_shows_the_variant_in_brackets() -> None:
    """rich reads `[default]` as a style tag unless the column is plain text."""
    from rich.console import Console

    from reconciler.cli._common import ProgressReporter

    reporter = ProgressReporter()
    reporter.spec_started("digits", 8)
    reporter.stage_started("digits", "default", "quantize")
    console = Console(record=True, width=160)
    console.print(reporter.progress.make_tasks_table(reporter.progress.tasks))
    assert "quantize [default]" in console.export_text()
