"""The `--remote` option and attaching the configured remote cache to a run's workspace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from reconciler.engine.workspace import Workspace
    from reconciler.remote import Remote

F = TypeVar("F", bound=Callable[..., Any])


def remote_option(func: F) -> F:
    return click.option(
        "--remote",
        "remote_url",
        metavar="URL",
        default=None,
        help="Remote cache URL (file://, sftp://, ssh://, s3://, gs://, http(s):// read-only), instead of "
        "NPUCTL_REMOTE or .npuctl.yaml; `none` turns it off.",
    )(func)


def warn(message: str) -> None:
    click.echo(f"npuctl: warning: {message}", err=True)


def open_for(root: Path, url: str | None, required: bool = False) -> Remote | None:
    """The run's remote. A refused configuration is one line on stderr: an error when `required`
    (push, pull), else a warning and the run goes on without a remote."""
    from reconciler.remote import ConfigError, open_remote

    try:
        return open_remote(root, url, warn)
    except ConfigError as exc:
        if required:
            raise click.ClickException(f"remote configuration refused: {exc}") from None
        warn(f"remote configuration refused, building without a remote: {exc}")
        return None


def attach(ws: Workspace, url: str | None, fetch: bool = True) -> None:
    ws.remote = open_for(ws.layout.root, url)
    ws.remote_fetch = fetch


def sync_command(verb: str, paths: tuple[Path, ...], remote_url: str | None, as_json: bool) -> int:
    """push and pull: move every stage the lock files record; exit 1 when there is no remote or it
    failed. `verb` is "push" or "pull" (reconciler.remote.sync's function of that name)."""
    import json

    from reconciler.cli import _common
    from reconciler.engine.workspace import Workspace
    from reconciler.remote import sync

    loaded = _common.load(paths)
    remote = open_for(loaded.root, remote_url, required=True)
    if remote is None:
        click.echo(f"npuctl {verb}: no remote configured (.npuctl.yaml, NPUCTL_REMOTE or --remote)", err=True)
        return 1
    ws = Workspace.open(loaded.root)
    try:
        ws.remote = remote
        result = (sync.push if verb == "push" else sync.pull)(ws, loaded.specs)
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
        absent = "not built here" if verb == "push" else "not on the remote"
        click.echo(
            f"{verb} {remote.url}: {len(result.done)} {verb}ed, "
            f"{len(result.present)} already there, {len(result.absent)} {absent}"
        )
    return 1 if remote.down is not None else 0
