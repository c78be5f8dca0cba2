"""npuctl apply: exit 0 all built and SLOs met, 3 an SLO failed or is unverified, 1 error."""

from __future__ import annotations

import time
from pathlib import Path

import click

from reconciler.cli import _common, _render
from reconciler.engine.results import SpecResult


def exit_code(results: list[SpecResult]) -> int:
    if any(r.failed for r in results):
        return 1
    not_run = any(s.action == "skipped" for r in results for s in r.stages)
    if not_run or not all(r.slo_ok for r in results):
        return 3
    return 0


@click.command(help="Build what changed, measure, judge SLOs, write lock files.")
@_common.paths_argument
@_common.output_options()
def command(paths: tuple[Path, ...], fmt: str, as_json: bool) -> int:
    from reconciler.cli import _ci
    from reconciler.engine.apply import apply_all
    from reconciler.engine.workspace import Workspace

    started = time.monotonic()
    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root)
    try:
        with _common.reporter() as reporter:
            results = loaded.invalid + apply_all(ws, loaded.specs, reporter)
    finally:
        ws.close()
    chosen = _common.chosen_format(fmt, as_json)
    _render.emit(results, chosen, "apply")
    if chosen == "text":
        from reconciler.cli.artifacts import where_lines

        for line in where_lines(loaded.root, list(results)):
            click.echo(line)
    _ci.annotate(_ci.result_annotations(results, loaded.specs))
    code = exit_code(results)
    summary = _ci.summary_line(results, "apply", time.monotonic() - started) + f"; exit {code}"
    click.echo(summary, err=chosen != "text")
    return code
