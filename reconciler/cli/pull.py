"""npuctl pull: exit 0 when the remote answered, 1 when there is none or it failed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from reconciler.cli import _common, _remote


@click.command(help="Pull every stage the specs' lock files record from the remote cache (verified).")
@_common.paths_argument
@_remote.remote_option
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
def command(paths: tuple[Path, ...], remote_url: str | None, as_json: bool) -> int:
    from reconciler.engine.workspace import Workspace
    from reconciler.remote import sync

    loaded = _common.load(paths)
    remote = _remote.open_for(loaded.root, remote_url, required=True)
    if remote is None:
        click.echo("npuctl pull: no remote configured (.npuctl.yaml, NPUCTL_REMOTE or --remote)", err=True)
        return 1
    ws = Workspace.open(loaded.root)
    try:
        ws.remote = remote
        result = sync.pull(ws, loaded.specs)
    finally:
        ws.close()
    if as_json:
        data = {
            "format_version": 1,
            "remote": remote.url,
            **result.to_json(),
            "stats": remote.stats.to_json(),
        }
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(
            f"pull {remote.url}: {len(result.done)} pulled, "
            f"{len(result.present)} already there, {len(result.absent)} not on the remote"
        )
    return 1 if remote.down is not None else 0
