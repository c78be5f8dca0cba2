"""npuctl explain SPEC [STAGE]: why a stage is (not) up to date, field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.cli import _common
from reconciler.repo import find_root


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 48 else text[:45] + "..."


@click.command(
    help="Why a stage is (not) up to date: the key's inputs, field by field against the last build."
)
@click.argument("spec")
@click.argument("stage", required=False)
@click.option("--all", "show_all", is_flag=True, help="Show unchanged inputs too.")
@click.option(
    "--profile",
    "profile",
    is_flag=True,
    help="Show evaluate's per-layer profile, attribution and suggestions.",
)
@_common.output_options(markdown=False)
def command(spec: str, stage: str | None, show_all: bool, profile: bool, fmt: str, as_json: bool) -> int:
    from reconciler.engine.explain import explain
    from reconciler.engine.stages import ORDER
    from reconciler.engine.workspace import Workspace

    if stage is not None and stage not in ORDER:
        raise click.UsageError(f"unknown stage {stage!r}; stages: {', '.join(ORDER)}")
    file = _common.find_spec(spec, find_root(Path.cwd())).resolve()
    loaded = _common.load((file,))
    matches = [s for s in loaded.specs if Path(s.path).resolve() == file]
    if not matches:
        click.echo(f"error: no valid spec named {spec!r}", err=True)
        for result in loaded.invalid:
            for error in result.errors:
                click.echo(error, err=True)
        return 1
    ws = Workspace.open(loaded.root)
    try:
        if profile:
            from reconciler.cli import _profile

            found = _profile.load(ws, matches[0])
            return _profile.render(matches[0].name, found, _common.chosen_format(fmt, as_json) == "json")
        explanations = explain(ws, matches[0], stage)
    finally:
        ws.close()
    if _common.chosen_format(fmt, as_json) == "json":
        payload = {
            "format_version": 1,
            "spec": matches[0].name,
            "stages": [
                {
                    "stage": e.stage,
                    "variant": e.variant,
                    "key": e.key,
                    "last_key": e.last_key,
                    "up_to_date": e.up_to_date,
                    "identity": e.identity,
                    "note": e.note,
                    "disagreements": e.disagreements,
                    "inputs": [{"path": p, "now": now, "last": last} for p, now, last in e.rows],
                }
                for e in explanations
            ],
        }
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return 0
    from rich.table import Table

    from reconciler.output import console as make_console

    console = make_console()
    for e in explanations:
        state = "up to date" if e.up_to_date else "out of date"
        console.print(
            f"[bold]{e.stage}[/bold] [{e.variant}]: {state}  key {(e.key or '?')[:12]}  "
            f"last {(e.last_key or 'never')[:12]}  {e.note}",
            markup=True,
            highlight=False,
        )
        table = Table(box=None, header_style="bold")
        for column in ("", "input", "now", "last build"):
            table.add_column(column, overflow="fold")
        for path, now, last in e.rows:
            changed = now != last
            if changed or show_all:
                table.add_row("*" if changed else "", path, _short(now), _short(last))
        if table.row_count:
            console.print(table)
        elif not show_all:
            console.print(
                "  no input changed since the last build (--all lists every input)", highlight=False
            )
        if e.disagreements:
            console.print(_disagreement_table(e.disagreements))
    return 0


def _disagreement_table(found: list[dict[str, str]]) -> Any:
    """Per node: where the op table placed it, where the vendor tool did, and which won."""
    from rich.table import Table

    from backends.sdk.vocab import OP_TABLE

    table = Table(title=f"{OP_TABLE} and the vendor tool disagree on {len(found)} node(s)", box=None)
    for column in ("node", "op", OP_TABLE, "vendor tool", "won"):
        table.add_column(column, overflow="fold")
    for d in found:
        table.add_row(d["node"], d["op_type"], d["op_table"], f"{d['tool']} ({d['tool_name']})", d["won"])
    return table
