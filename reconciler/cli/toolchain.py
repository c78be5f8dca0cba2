"""`npuctl toolchain install NAME` / `npuctl toolchain list`: managed toolchain environments.

Toolchains with dependency pins that conflict with npuctl's own (rknn-toolkit2: numpy<=1.26, onnx<=1.18)
live in their own virtual environment (backends.sdk.toolchains), which this command creates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

FORMAT_VERSION = 1


@click.group("toolchain", help="Install or list managed toolchain environments.")
def command() -> None:
    pass


@command.command("list", help="Managed toolchains, where they live and whether they are installed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (format_version 1).")
def list_cmd(as_json: bool) -> int:
    from backends.sdk import toolchains

    rows = [toolchains.status(tc) for tc in toolchains.TOOLCHAINS.values()]
    if as_json:
        click.echo(
            json.dumps({"format_version": FORMAT_VERSION, "toolchains": rows}, indent=2, sort_keys=True)
        )
        return 0
    for row in rows:
        state = "installed" if row["installed"] else "not installed"
        click.echo(f"{row['name']:<8} {row['version']:<8} {state:<14} {row['path']}")
    return 0


@command.command(
    "install",
    help="Create the managed environment of toolchain NAME (e.g. rknn), or with --needed of every "
    "toolchain the specs under PATHS (default specs/) build with.",
)
@click.argument("name", required=False)
@click.option("--needed", is_flag=True, help="Install what the repository's specs need (nothing if none).")
@click.option(
    "--specs",
    "spec_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="With --needed: spec files or folders.",
)
@click.option("--force", is_flag=True, help="Rebuild the environment even when it is complete.")
@click.option(
    "--wheel",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Install the toolchain itself from this local wheel instead of the registry.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the result line.")
def install_cmd(
    name: str | None, needed: bool, spec_paths: tuple[Path, ...], force: bool, wheel: Path | None, quiet: bool
) -> int:
    if needed == (name is not None):
        print("error: give a toolchain NAME or --needed (not both)", file=sys.stderr)
        return 1
    if name is None:
        names = needed_toolchains(spec_paths)
        if not names:
            click.echo("no managed toolchain needed by these specs")
        return max((_install_one(n, force, None, quiet) for n in names), default=0)
    return _install_one(name, force, wheel, quiet)


def _install_one(name: str, force: bool, wheel: Path | None, quiet: bool) -> int:
    from backends.sdk import toolchains

    tc = toolchains.TOOLCHAINS.get(name)
    if tc is None:
        known = ", ".join(sorted(toolchains.TOOLCHAINS))
        print(f"error: unknown toolchain {name!r} (known: {known})", file=sys.stderr)
        return 1

    def log(message: str) -> None:
        if not quiet and message.strip():
            click.echo(message.rstrip(), err=True)

    try:
        path = toolchains.install(tc, log=log, force=force, wheel=wheel)
    except toolchains.InstallError as exc:
        print(f"error: {tc.dirname}: {exc}", file=sys.stderr)
        return 1
    click.echo(f"{tc.dirname}: ready at {path}")
    return 0


def needed_toolchains(paths: tuple[Path, ...]) -> list[str]:
    """Managed toolchains (by name) of the backends that build the valid specs under `paths`; a backend
    declares its own with a `managed_toolchain` attribute."""
    from backends import registry
    from backends.catalog import target as catalog_target
    from backends.sdk.errors import BackendError
    from reconciler.repo import Layout, find_root
    from reconciler.spec import check

    root = find_root(Path.cwd())
    names = set()
    for report in check(list(paths) or [Layout(root).default_specs()], root, semantic=False):
        if report.spec is None or not report.valid:
            continue
        override = (report.spec.field("compile") or {}).get("backend")
        try:
            backend = registry.backend_for(catalog_target(report.spec.target), override)
        except (BackendError, KeyError):
            continue
        managed = getattr(backend, "managed_toolchain", None)
        if isinstance(managed, str):
            names.add(managed)
    return sorted(names)
