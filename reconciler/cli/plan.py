"""npuctl plan: exit 0 nothing to do, 2 changes pending, 1 error (Terraform's -detailed-exitcode)."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _common, _render
from reconciler.engine.results import SpecResult


def exit_code(results: list[SpecResult]) -> int:
    if any(r.errors or any(s.action == "stalled" for s in r.stages) for r in results):
        return 1
    if any(s.action != "cached" for r in results for s in r.stages):
        return 2
    return 0


@click.command(help="Show, per spec and stage, what apply would build, reuse or re-judge.")
@_common.paths_argument
@_common.output_options()
def command(paths: tuple[Path, ...], fmt: str, as_json: bool) -> int:
    from reconciler.engine.plan import plan_all
    from reconciler.engine.workspace import Workspace

    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root)
    try:
        results = loaded.invalid + plan_all(ws, loaded.specs)
    finally:
        ws.close()
    _render.emit(results, _common.chosen_format(fmt, as_json), "plan")
    return exit_code(results)
