"""`npuctl backends [--json]`: every registered backend, where it comes from, what it builds here.

Built-in backends and those of installed plug-ins (entry point group `npuctl.backends`), with the
catalog targets each builds by default (built-in and plug-in catalogs, group `npuctl.catalog`), the
state of its toolchain and the evidence its measurements can carry on this machine.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from typing import Any

import click

from reconciler.cli import _common


def rows() -> list[dict[str, Any]]:
    import backends.catalog as catalog
    from backends import registry
    from backends.sdk.base import STAGES
    from backends.sdk.errors import BackendError

    plugins = {ep.name: ep for ep in entry_points(group="npuctl.backends")}
    out = []
    for name, ref in sorted(registry.known().items()):
        origin = "built-in" if name in registry.BUILTIN else _distribution(plugins.get(name))
        row: dict[str, Any] = {
            "name": name,
            "origin": origin,
            "module": ref,
            "targets": sorted(t.id for t in catalog.targets().values() if t.backend == name),
        }
        try:
            chosen = registry.backend(name)
            row["toolchain"] = chosen.missing_toolchain() or "ready"
            row["stages"] = [s for s in STAGES if s in chosen.stages]
            row["evidence"] = str(getattr(chosen, "evidence_here", "not declared by the backend"))
        except BackendError as exc:
            row.update({"toolchain": f"cannot be loaded: {exc}", "stages": [], "evidence": "none"})
        out.append(row)
    return out


def _distribution(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"plug-in {dist.name} {dist.version}" if dist is not None else "plug-in"


@click.command(help="List the registered backends: origin, targets, toolchain state, evidence here.")
@_common.output_options(markdown=False)
def command(fmt: str, as_json: bool) -> int:
    import backends.catalog as catalog

    found = rows()
    if _common.chosen_format(fmt, as_json) == "json":
        body = {
            "format_version": 1,
            "backends": found,
            "catalog_plugins": [str(f) for f in catalog.plugin_folders()],
        }
        click.echo(json.dumps(body, indent=2, sort_keys=True))
        return 0
    for row in found:
        targets = ", ".join(row["targets"]) or "no catalog target (use compile.backend)"
        click.echo(f"{row['name']} ({row['origin']}): {targets}")
        click.echo(f"  toolchain: {row['toolchain']}")
        click.echo(f"  stages: {', '.join(row['stages']) or 'none'}; evidence here: {row['evidence']}")
    for folder in catalog.plugin_folders():
        click.echo(f"catalog plug-in: {folder}")
    return 0
