"""npuctl report SPEC: a self-contained HTML page (placement graph, latency, sensitivity, SLO history).

With `--rev A --rev B` (or `--base REF`, REF against the working tree's lock file) it prints the two
revisions' recorded measurements side by side instead (reconciler.report.compare).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from reconciler.report.compare import RevisionDiff
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
@click.option(
    "--rev",
    "revs",
    metavar="REV",
    multiple=True,
    help="Compare two revisions' measurements side by side (give --rev twice; once: REV against the "
    "working tree's lock file).",
)
@click.option(
    "--base",
    "base_ref",
    metavar="REF",
    default=None,
    help="Compare REF's measurements with the working tree's lock file (same as one --rev).",
)
def command(
    spec: str, output: Path | None, as_json: bool, revs: tuple[str, ...], base_ref: str | None
) -> int:
    from reconciler.repo import Layout, find_root
    from reconciler.spec import SpecErrors, load

    root = find_root(Path.cwd())
    if revs or base_ref is not None:
        return _compare(root, spec, [*([base_ref] if base_ref else []), *revs], as_json)
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
    import json

    from reconciler.report.data import gather

    try:
        data = gather(root, loaded)
    except LookupError as exc:
        click.echo(f"npuctl report: {exc}", err=True)
        return 1
    payload = {"format_version": 1, **data.to_json()}
    click.echo(json.dumps(payload, indent=1, sort_keys=True, default=str))
    return 0


def _compare(root: Path, spec: str, refs: list[str], as_json: bool) -> int:
    """Two revisions side by side; with one, it against the working tree's lock file."""
    import json

    from reconciler.cli import _common
    from reconciler.gitops.gitref import GitError
    from reconciler.gitops.revision import lock_at
    from reconciler.repo import Layout
    from reconciler.report.compare import Side, diff
    from reconciler.state.lockread import LockView
    from reconciler.state.store import Store

    if len(refs) > 2:
        click.echo("npuctl report: compare two revisions at most (--rev A --rev B, or --base REF)", err=True)
        return 1
    sides: list[Side] = []
    try:
        for ref in refs:
            at = lock_at(root, ref, spec)
            sides.append(Side(at.label, LockView.from_json(at.lock)))
    except GitError as exc:
        click.echo(f"npuctl report: {exc}", err=True)
        return 1
    if len(sides) == 1:
        found = _common.spec_lock(spec, "report")
        if found is None:
            return 1
        sides.append(Side("working tree", found[1]))
    name = sides[-1].lock.spec or spec
    compared = diff(name, sides[0], sides[1], Store(Layout(root).store))
    if as_json:
        click.echo(json.dumps(compared.to_json(), indent=1, sort_keys=True))
        return 0
    for line in compare_lines(compared):
        click.echo(line)
    return 0


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _change(old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return "—"
    delta = new - old
    relative = f" ({delta / old:+.1%})" if old else ""
    return f"{delta:+.3g}{relative}"


def compare_lines(compared: RevisionDiff) -> list[str]:
    """The two revisions' measurements in aligned columns, then the per-layer times that changed most."""
    from reconciler.cli._render import columns

    lines = [f"{compared.spec}: {compared.old} -> {compared.new}"]
    rows: list[tuple[str, ...]] = [("measurement", "variant", compared.old, compared.new, "change")]
    rows += [
        (r.name, r.variant, _number(r.old), _number(r.new), _change(r.old, r.new)) for r in compared.rows
    ]
    lines += columns(rows) if compared.rows else ["  no measurements recorded at either revision"]
    if compared.layers:
        lines.append("per-layer profile (default variant), largest changes first:")
        layer_rows: list[tuple[str, ...]] = [("layer", "op", "old ms", "new ms", "change")]
        layer_rows += [
            (r.name, r.op_type, _number(r.old_ms), _number(r.new_ms), _change(r.old_ms, r.new_ms))
            for r in compared.layers
        ]
        lines += columns(layer_rows)
    lines += [f"note: {note}" for note in compared.notes]
    return lines
