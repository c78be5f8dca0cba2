"""npuctl status: sync (Synced / OutOfSync / Unknown), health (Healthy / Degraded / Progressing /
Unknown) and the one status word (Stalled, Failed, OutOfSync or the health) per spec, with the verdicts
and what stands on carried-over evidence.

Status is the plan's view (local store and committed lock alike), so it reads the same word as plan
and apply for the same spec. Progressing means what Argo CD means by it, an operation in flight: only a
spec whose lock an apply holds right now reads Progressing; a spec never built, or waiting for a
rebuild, is OutOfSync with its health Unknown.

Exit 1 when a spec's lock file cannot be read (conflict markers, broken JSON, an unknown format: it is
named, file:line:col); otherwise 0 always, unless `--exit-code`: then as apply's, 0 when every spec is Healthy, 3 when one is
Degraded, Unknown, OutOfSync or Progressing, 1 when one is Stalled or Failed (or its lock fails its
integrity checks). An argument that names no spec is an error (exit 1) either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.cli import _common
from reconciler.engine import health
from reconciler.engine.results import SpecResult
from reconciler.state.lockread import LockView


def exit_code(rows: list[dict[str, Any]]) -> int:
    """apply's codes over the status words: 1 Stalled/Failed or a tampered lock, 3 anything not
    Healthy, else 0."""
    if any(r["status"] in (health.STALLED, health.FAILED) or r["lock_problems"] for r in rows):
        return 1
    return 0 if all(r["status"] == health.HEALTHY for r in rows) else 3


def _row(result: SpecResult, lock: LockView | None, holder: str | None, built: bool = True) -> dict[str, Any]:
    sync, state, status = result.sync, result.health, result.status
    pending = [s for s in result.stages if s.action != "cached"]
    problems = result.errors or result.lock_problems
    why = problems[0] if problems else (f"{pending[0].name}: {pending[0].reason}" if pending else "")
    if not built and not problems and status != health.STALLED:
        why = "never built (no lock file): run `npuctl apply`"
    if holder is not None and status != health.STALLED:
        state = status = health.PROGRESSING
        why = f"apply in progress ({holder})"
    verdicts = [v.to_json() for v in result.slo]
    if not verdicts and lock is not None and not result.lock_problems:
        verdicts += [{**v.to_json(), "stale": True} for v in lock.verdicts]
    if not why:
        why = "; ".join(f"{v['name']}: {v['verdict']}" for v in verdicts if v.get("passed") is not True)
    if result.carried_over and not problems:
        carried = f"carried over, not re-verified here: {len(result.carried_over)} stage(s)"
        why = f"{carried}; {why}" if why else carried
    return {
        "name": result.name,
        "target": result.target,
        "status": status,
        "sync": sync,
        "health": state,
        "reason": why,
        "carried_over": result.carried_over,
        "lock_problems": result.lock_problems,
        "verdicts": verdicts,
        "slo_passed": sum(1 for v in verdicts if v.get("passed") is True and not v.get("stale")),
        "slo_total": len(verdicts),
        **({"throughput_fps": result.throughput_fps} if result.throughput_fps else {}),
    }


@click.command(help="Sync and health per spec, with the last verdicts and carried-over evidence.")
@_common.paths_argument
@click.option(
    "--exit-code",
    "gate",
    is_flag=True,
    help="Exit 0 when every spec is Healthy, 3 when one is Degraded, Unknown, OutOfSync or Progressing, "
    "1 when one is Stalled or Failed (apply's codes): a CI gate.",
)
@_common.output_options(markdown=False)
def command(paths: tuple[Path, ...], gate: bool, fmt: str, as_json: bool) -> int:
    from reconciler.engine.plan import plan_all
    from reconciler.engine.workspace import Workspace
    from reconciler.repo import Layout
    from reconciler.state import lockfile, locks

    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root, reading=True)
    try:
        results = plan_all(ws, loaded.specs)
        rows = [_row(r, None, None) for r in loaded.invalid]
        unreadable = []
        for spec, result in zip(loaded.specs, results, strict=True):
            lock_file = Layout.lock_file(spec.path)
            holder = locks.holder_if_held(ws.layout.locks, f"spec-{spec.name}")
            try:
                lock = ws.committed_lock(lock_file)[0]  # as the plan read it: parsed once
            except lockfile.LockUnreadable as exc:
                lock = None
                unreadable.append(str(exc))
            rows.append(_row(result, lock, holder, built=lock_file.exists()))
    finally:
        ws.close()
    for line in unreadable:
        click.echo(f"npuctl status: {line}", err=True)
    code = 1 if unreadable else exit_code(rows) if gate else 0
    if _common.chosen_format(fmt, as_json) == "json":
        click.echo(json.dumps({"format_version": 1, "specs": rows}, indent=2, sort_keys=True))
        return code
    _print_table(rows)
    from reconciler.cli._render import carried_lines

    for row in rows:
        for line in carried_lines(row["carried_over"]):
            click.echo(f"{row['name']}: {line}")
        for line in row["lock_problems"]:
            click.echo(f"{row['name']}: lock integrity: {line}")
    return code


COLUMNS = ("spec", "target", "status", "sync", "health", "SLOs met", "FPS", "reason")


def _print_table(rows: list[dict[str, Any]]) -> None:
    """A rich table on a terminal; piped, the same columns as plain text (what the rich table prints
    there, without its layout pass: a third of a cold `status` of 10,000 specs), never folded."""
    import sys

    from reconciler.cli._render import columns, fps_text

    cells: list[tuple[str, ...]] = []
    for row in rows:
        met = f"{row['slo_passed']}/{row['slo_total']}" if row["slo_total"] else "—"
        fps = ", ".join(fps_text(v) for v in (row.get("throughput_fps") or {}).values()) or "—"
        cells.append(
            (row["name"], row["target"], row["status"], row["sync"], row["health"], met, fps, row["reason"])
        )
    if not sys.stdout.isatty():
        click.echo("\n".join(columns([COLUMNS, *cells], indent=" ")))
        return
    from rich.table import Table

    from reconciler.output import console as make_console

    table = Table(box=None, header_style="bold")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row_cells in cells:
        table.add_row(*row_cells)
    make_console().print(table)
