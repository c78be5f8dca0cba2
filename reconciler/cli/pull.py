"""npuctl pull: exit 0 when the remote answered, 1 when there is none or it failed."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _remote, _specargs


@click.command(help="Pull every stage the specs' lock files record from the remote cache (verified).")
@_specargs.argument
@_remote.remote_option
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
def command(paths: tuple[Path, ...], remote_url: str | None, as_json: bool) -> int:
    return _remote.sync_command("pull", paths, remote_url, as_json)
