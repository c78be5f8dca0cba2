"""npuctl report SPEC: a self-contained HTML page (placement graph, latency, sensitivity, SLO history)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from reconciler.spec import LoadedSpec


@click.command(
    help="Write a self-contained HTML report for a spec: placement, latency, sensitivity, SLO history."
)
@click.argument("spec")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Output file (default: .npuctl/reports/NAME.html).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print everything the page shows (SLOs, placement, latency, sensitivity, profile with its "
    "attribution and suggestions, history) as JSON instead of writing the page.",
)
def command(spec: str, output: Path | None, as_json: bool) -> int:
    from reconciler.repo import Layout, find_root
    from reconciler.spec import SpecErrors, load

    root = find_root(Path.cwd())
    from reconciler.cli._common import find_spec

    path = find_spec(spec, root)
    try:
        loaded = load(path, root)
    except SpecErrors as exc:
        click.echo(f"npuctl report: {exc.errors[0]}", err=True)
        return 1
    if as_json:
        return _print_json(root, loaded)
    try:
        import jinja2  # noqa: F401
    except ImportError as exc:
        click.echo(
            f"npuctl report needs the report extra: pip install 'npuctl[report]' ({exc.name} missing)",
            err=True,
        )
        return 1
    from reconciler.report.data import gather
    from reconciler.report.render import html

    try:
        data = gather(root, loaded)
    except LookupError as exc:
        click.echo(f"npuctl report: {exc}", err=True)
        return 1
    target = output or Layout(root).state_dir / "reports" / f"{loaded.name}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(html(data), encoding="utf-8")
    click.echo(str(target))
    for note in data.notes:
        click.echo(f"note: {note}", err=True)
    return 0


def _print_json(root: Path, loaded: LoadedSpec) -> int:
    """The page's data as JSON: what `gather` reads, so the page and this never disagree."""
    import dataclasses
    import json

    from reconciler.report.data import gather

    try:
        data = gather(root, loaded)
    except LookupError as exc:
        click.echo(f"npuctl report: {exc}", err=True)
        return 1
    payload = {"format_version": 1, **dataclasses.asdict(data)}
    click.echo(json.dumps(payload, indent=1, sort_keys=True, default=str))
    return 0
