"""npuctl status: Ready / Reconciling / Stalled per spec, with the last recorded verdicts. Always exit 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.cli import _common


def _row(result: Any, lock: dict[str, Any] | None, holder: str | None) -> dict[str, Any]:
    status = result.status
    pending = [s for s in result.stages if s.action != "cached"]
    why = (
        result.errors[0] if result.errors else (f"{pending[0].name}: {pending[0].reason}" if pending else "")
    )
    if holder is not None and status != "Stalled":
        status, why = "Reconciling", f"apply in progress ({holder})"
    verdicts = [
        v for variant in ((lock or {}).get("variants") or {}).values() for v in variant.get("verdicts", [])
    ]
    if not why:
        why = "; ".join(f"{v['name']}: {v['verdict']}" for v in verdicts if v.get("passed") is not True)
    return {
        "name": result.name,
        "target": result.target,
        "status": status,
        "reason": why,
        "verdicts": verdicts,
        "slo_passed": sum(1 for v in verdicts if v.get("passed") is True),
        "slo_total": len(verdicts),
    }


@click.command(help="Ready / Reconciling / Stalled per spec, with the last verdicts.")
@_common.paths_argument
@_common.output_options(markdown=False)
def command(paths: tuple[Path, ...], fmt: str, as_json: bool) -> int:
    from reconciler.engine.plan import plan_all
    from reconciler.engine.workspace import Workspace
    from reconciler.repo import Layout
    from reconciler.state import lockfile, locks

    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root)
    try:
        results = plan_all(ws, loaded.specs)
        rows = [_row(r, None, None) for r in loaded.invalid]
        for spec, result in zip(loaded.specs, results, strict=True):
            lock = lockfile.read(Layout.lock_file(spec.path))
            rows.append(_row(result, lock, locks.holder_if_held(ws.layout.locks, f"spec-{spec.name}")))
    finally:
        ws.close()
    if _common.chosen_format(fmt, as_json) == "json":
        click.echo(json.dumps({"format_version": 1, "specs": rows}, indent=2, sort_keys=True))
        return 0
    from rich.table import Table

    from reconciler.cli._render import console as make_console

    table = Table(box=None, header_style="bold")
    for column in ("spec", "target", "status", "SLOs met", "reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        met = f"{row['slo_passed']}/{row['slo_total']}" if row["slo_total"] else "—"
        table.add_row(row["name"], row["target"], row["status"], met, row["reason"])
    make_console().print(table)
    return 0
