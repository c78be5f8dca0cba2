"""npuctl gc [--dry-run]: never removes what a lock file or a recorded verdict refers to."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from reconciler.cli import _common


@click.command(help="Remove store objects no spec, lock file or recorded verdict refers to.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@_common.output_options(markdown=False)
def command(dry_run: bool, fmt: str, as_json: bool) -> int:
    from pathlib import Path

    from reconciler.engine.gc import collect_garbage
    from reconciler.engine.workspace import Workspace
    from reconciler.repo import find_root

    ws = Workspace.open(find_root(Path.cwd()))
    try:
        report = collect_garbage(ws, dry_run)
    finally:
        ws.close()
    if _common.chosen_format(fmt, as_json) == "json":
        click.echo(json.dumps({"format_version": 1, "dry_run": dry_run, **asdict(report)}, indent=2))
        return 0
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {len(report.removed)} objects ({report.freed_bytes / 1e6:.1f} MB), kept {report.kept}"
    )
    if report.temp_removed:
        click.echo(f"{verb} {len(report.temp_removed)} stale temporary files")
    return 0
