"""`npuctl artifacts SPEC [--json]`: the deployable files of a spec, where they are, and their digests."""

from __future__ import annotations

import json
from pathlib import Path

import click

from reconciler.cli import _common


@click.command(help="List a spec's deployable files (per shape variant): name, size, digest, where they are.")
@click.argument("spec")
@_common.output_options(markdown=False)
def command(spec: str, fmt: str, as_json: bool) -> int:
    from reconciler.engine.export import ExportError, deployables, primary
    from reconciler.repo import Layout
    from reconciler.state.store import Store

    found_lock = _common.spec_lock(spec, "artifacts")
    if found_lock is None:
        return 1
    root, lock = found_lock
    try:
        found = deployables(lock, Store(Layout(root).store), root)
    except ExportError as exc:
        click.echo(f"npuctl artifacts: {spec}: {exc}", err=True)
        return 1
    if _common.chosen_format(fmt, as_json) == "json":
        rows = [
            {
                "variant": v.name,
                "inputs": v.inputs,
                "file": a.file,
                "name": a.name,
                "size": a.size,
                "sha256": a.digest,
                "entry": a == primary(v),
                "path": str(a.stored.relative_to(root)) if a.stored is not None else None,
            }
            for v in found
            for a in v.artifacts
        ]
        click.echo(json.dumps({"format_version": 1, "spec": lock.spec, "artifacts": rows}, indent=2))
        return 0
    for variant in found:
        shapes = ", ".join(f"{k} {'x'.join(map(str, d))}" for k, d in sorted(variant.inputs.items()))
        click.echo(f"{variant.name} ({shapes}):")
        for art in variant.artifacts:
            where = str(art.stored.relative_to(root)) if art.stored is not None else "not in the local store"
            mark = "*" if art == primary(variant) else " "
            click.echo(f" {mark} {art.file:<28} {art.size:>12,} B  sha256 {art.digest[:16]}  {where}")
    click.echo(f"(* the file an app opens) copy them out with: npuctl export {lock.spec or spec} DIR")
    return 0


def where_lines(root: Path, results: list[object]) -> list[str]:
    """For apply's text output: one line per spec whose compiled files are in the local store."""
    from reconciler.engine.export import ExportError, deployables, primary
    from reconciler.repo import Layout
    from reconciler.state import lockfile, lockread
    from reconciler.state.store import Store

    store = Store(Layout(root).store)
    lines = []
    for result in results:
        spec_file = root / str(getattr(result, "file", ""))
        try:
            lock = lockread.read(Layout.lock_file(spec_file)) if spec_file.is_file() else None
            found = deployables(lock, store, root) if lock is not None else []
        except (ExportError, lockfile.LockUnreadable):  # apply named an unreadable lock already
            continue
        entries = [primary(v) for v in found if all(a.stored is not None for a in v.artifacts)]
        if entries:
            files = ", ".join(sorted({a.file for a in entries}))
            name = getattr(result, "name", "?")
            lines.append(
                f"{name}: artifacts {files} in {Layout(root).store.relative_to(root)} (npuctl export {name} DIR)"
            )
    return lines
