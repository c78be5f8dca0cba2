"""`npuctl export SPEC DIR`: the deployable files under their real names, a manifest and SHA256SUMS."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _common


@click.command(help="Copy a spec's deployable files (verified) into DIR, with manifest.json and SHA256SUMS.")
@click.argument("spec")
@click.argument("dest", type=click.Path(path_type=Path))
def command(spec: str, dest: Path) -> int:
    from reconciler.engine.export import ExportError, deployables, export
    from reconciler.repo import Layout
    from reconciler.state.store import Store

    found_lock = _common.spec_lock(spec, "export")
    if found_lock is None:
        return 1
    root, lock = found_lock
    try:
        written = export(
            deployables(lock, Store(Layout(root).store)), dest, str(lock.get("spec")), str(lock.get("target"))
        )
    except (ExportError, OSError) as exc:
        click.echo(f"npuctl export: {spec}: {exc}", err=True)
        return 1
    for file in written:
        click.echo(str(file))
    return 0
