"""npuctl apply: exit 0 built and no SLO failed, 3 an SLO failed or has no evidence, 1 error.

The rule for "not verifiable here": an SLO judged on evidence this machine cannot re-verify (carried
over from the committed lock because the toolchain is missing, or met only on an estimate because the
device is absent) does not fail apply; its health reads Unknown or carries the "carried over" mark,
never a plain pass. `--strict` makes apply exit 3 unless every SLO passed on a measurement.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from reconciler.cli import _common, _executor, _remote, _render
from reconciler.engine.results import SpecResult


def exit_code(results: list[SpecResult], strict: bool = False) -> int:
    if any(r.failed for r in results):
        return 1
    verdicts = [v for r in results for v in r.slo]
    if any(v.passed is False or v.verdict == "unverified" for v in verdicts):
        return 3
    if strict and any(v.passed is not True or v.carried_over for v in verdicts):
        return 3
    return 0


@click.command(help="Build what changed, measure, judge SLOs, write lock files.")
@_common.paths_argument
@click.option(
    "--remeasure",
    is_flag=True,
    help="Re-run evaluate on this machine even where the lock records measurements for the same key; "
    "the lock then keeps the other runner's measurements beside this one's.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 3 unless every SLO passed on a measurement taken for this build (no estimate, nothing "
    "carried over).",
)
@_remote.remote_option
@_executor.options
@_common.output_options()
def command(
    paths: tuple[Path, ...],
    remeasure: bool,
    strict: bool,
    remote_url: str | None,
    jobs: int | None,
    executor_name: str,
    address: str | None,
    fmt: str,
    as_json: bool,
) -> int:
    from reconciler.cli import _ci
    from reconciler.engine.apply import apply_all
    from reconciler.engine.workspace import Workspace

    started = time.monotonic()
    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root)
    try:
        _remote.attach(ws, remote_url)
        executor = _executor.make(executor_name, jobs, address, ws.layout.state_dir)
        try:
            with _common.reporter() as reporter:
                results = loaded.invalid + apply_all(
                    ws, loaded.specs, reporter, remeasure=remeasure, executor=executor
                )
        finally:
            if executor is not None:
                executor.close()
    finally:
        ws.close()
    if ws.close_warning:
        click.echo(f"npuctl: warning: {ws.close_warning}", err=True)
    chosen = _common.chosen_format(fmt, as_json)
    _render.emit(results, chosen, "apply")
    if chosen == "text":
        from reconciler.cli.artifacts import where_lines

        for line in where_lines(loaded.root, list(results)):
            click.echo(line)
    _ci.annotate(_ci.result_annotations(results, loaded.specs))
    code = exit_code(results, strict)
    summary = _ci.summary_line(results, "apply", time.monotonic() - started) + f"; exit {code}"
    click.echo(summary, err=chosen != "text")
    return code
