"""npuctl audit: which model version met which SLO, from the lock files' git history and the ledger. Exit 0."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _common


@click.command(help="Which model version met which SLO, measured how, since when (git history + ledger).")
@_common.paths_argument
@click.option("--spec", "spec_name", metavar="NAME", help="Only this spec (metadata.name).")
@click.option(
    "--model",
    metavar="SHA",
    help="Only this model: a digest prefix (ONNX file or imported model) or a model.version label.",
)
@click.option("--target", metavar="T", help="Only this target id.")
@click.option("--since", metavar="DATE", help="Only entries at or after DATE (YYYY-MM-DD or ISO date-time).")
@click.option(
    "--until", metavar="DATE", help="Only entries at or before DATE (a bare date includes that day)."
)
@click.option(
    "--rev",
    metavar="REV",
    default=None,
    help="The history of this branch, tag or commit instead of HEAD (the work tree is then not read).",
)
@_common.output_options()
def command(
    paths: tuple[Path, ...],
    spec_name: str | None,
    model: str | None,
    target: str | None,
    since: str | None,
    until: str | None,
    rev: str | None,
    fmt: str,
    as_json: bool,
) -> int:
    from reconciler.audit import render
    from reconciler.audit.query import AuditError, Filters, parse_date, run
    from reconciler.repo import find_root

    root = find_root(Path.cwd())
    try:
        filters = Filters(
            spec_name,
            model,
            target,
            parse_date(since) if since else None,
            parse_date(until, end=True) if until else None,
        )
        audit = run(root, list(paths), filters, rev)
    except AuditError as exc:
        click.echo(f"npuctl audit: {exc}", err=True)
        return 1
    chosen = _common.chosen_format(fmt, as_json)
    if chosen == "json":
        click.echo(render.to_json(audit))
    elif chosen == "markdown":
        click.echo(render.to_markdown(audit), nl=False)
    else:
        render.print_text(audit)
    return 0
