"""npuctl push: exit 0 when the remote answered, 1 when there is none or it failed."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _remote, _specargs


@click.command(help="Push every stage the specs' lock files record to the remote cache (what is built here).")
@_specargs.argument
@_remote.remote_option
@click.option(
    "--verify",
    is_flag=True,
    help="List the remote's records even when this machine's record says it holds every stage "
    "(after someone else removed records from it).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
def command(paths: tuple[Path, ...], remote_url: str | None, verify: bool, as_json: bool) -> int:
    return _remote.sync_command("push", paths, remote_url, as_json, verify=verify)
