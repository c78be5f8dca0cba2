"""npuctl fsck [--check-only]: 0 when the state is sound (or was repaired), 1 when it is not."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from reconciler.cli import _common
from reconciler.cli.apply import exit_code


@click.command(
    help="Verify every store object, record and lock file; quarantine and rebuild what is corrupt."
)
@click.option("--check-only", is_flag=True, help="Report only: quarantine nothing, rebuild nothing.")
@_common.output_options(markdown=False)
def command(check_only: bool, fmt: str, as_json: bool) -> int:
    from reconciler.engine.apply import apply_all
    from reconciler.engine.fsck import check
    from reconciler.engine.workspace import Workspace

    loaded = _common.load(())
    ws = Workspace.open(loaded.root)
    rebuilt = None
    try:
        report = check(ws, quarantine=not check_only)
        if not report.clean and not check_only:
            ws.repair = True
            with _common.reporter() as reporter:
                results = apply_all(ws, loaded.specs, reporter)
            rebuilt = [s.name for r in results for s in r.stages if s.action == "built"]
            ok = exit_code(results) != 1
            after = check(ws, quarantine=False)
            repaired = ok and not after.missing and not after.corrupt and after.database == "ok"
        else:
            repaired = report.clean
    finally:
        ws.close()
    if _common.chosen_format(fmt, as_json) == "json":
        data = {"format_version": 1, **asdict(report), "rebuilt": rebuilt, "ok": repaired}
        click.echo(json.dumps(data, indent=2))
        return 0 if repaired else 1
    click.echo(f"{report.objects} store objects checked; database: {report.database}")
    for digest in report.corrupt:
        verb = "found corrupt" if check_only else "quarantined in .npuctl/corrupt"
        click.echo(f"corrupt: {digest} ({verb})")
    for line in report.misnamed:
        click.echo(f"not a store object: {line}")
    for line in report.missing:
        click.echo(f"missing: {line}")
    for line in report.unreadable:
        click.echo(f"unreadable lock: {line}")
    if report.lock_only:
        click.echo(
            f"{report.lock_only} object(s) recorded only in the lock files (built elsewhere; not needed here yet)"
        )
    if rebuilt is not None:
        click.echo(f"rebuilt {len(rebuilt)} stages: {', '.join(rebuilt) or 'none'}")
    click.echo("ok" if repaired else "NOT ok")
    return 0 if repaired else 1
