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
