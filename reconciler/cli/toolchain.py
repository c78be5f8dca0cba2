"""`npuctl toolchain install NAME` / `npuctl toolchain list`: managed toolchain environments.

Toolchains with dependency pins that conflict with npuctl's own (rknn-toolkit2: numpy<=1.26, onnx<=1.18)
live in their own virtual environment (backends.toolchains), which this command creates.
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
    from backends import toolchains

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


@command.command("install", help="Create the managed environment of toolchain NAME (e.g. rknn).")
@click.argument("name")
@click.option("--force", is_flag=True, help="Rebuild the environment even when it is complete.")
@click.option(
    "--wheel",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Install the toolchain itself from this local wheel instead of the registry.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the result line.")
def install_cmd(name: str, force: bool, wheel: Path | None, quiet: bool) -> int:
    from backends import toolchains

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
