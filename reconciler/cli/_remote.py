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


def sync_command(
    verb: str, paths: tuple[Path, ...], remote_url: str | None, as_json: bool, verify: bool = False
) -> int:
    """push and pull: move every stage the lock files record; exit 1 when there is no remote or it
    failed. `verb` is "push" or "pull" (reconciler.remote.sync's function of that name); `verify`:
    push lists the remote whatever this machine's record of it says."""
    import json

    from reconciler.engine.workspace import Workspace
    from reconciler.remote import sync
    from reconciler.repo import Layout, find_root
    from reconciler.spec._discover import discover_with_errors

    root = find_root(Path.cwd())
    spec_files, missing = discover_with_errors(list(paths) or [Layout(root).default_specs()], root)
    for error in missing:
        click.echo(f"npuctl {verb}: {error}", err=True)
    if missing:
        return 1
    remote = open_for(root, remote_url, required=True)
    if remote is None:
        click.echo(f"npuctl {verb}: no remote configured (.npuctl.yaml, NPUCTL_REMOTE or --remote)", err=True)
        return 1
    if verb == "push" and not remote.config.writable:
        click.echo(
            f"npuctl push: {remote.url} is read-only (http(s):// remotes are): nothing can be pushed",
            err=True,
        )
        return 1
    ws = Workspace.open(root)
    try:
        ws.remote = remote
        result = sync.push(ws, spec_files, verify) if verb == "push" else sync.pull(ws, spec_files)
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
    elif result.known:
        click.echo(
            f"push {remote.url}: nothing new since the last push or pull here ({len(result.present)} "
            "already there by this machine's record; --verify lists the remote)"
        )
    else:
        absent = "not built here" if verb == "push" else "not on the remote"
        click.echo(
            f"{verb} {remote.url}: {len(result.done)} {verb}ed, "
            f"{len(result.present)} already there, {len(result.absent)} {absent}"
        )
    for line in result.unreadable:
        click.echo(f"npuctl {verb}: {line}", err=True)
    if remote.down is not None:
        click.echo(f"npuctl {verb}: {remote.url} failed: {remote.down}", err=True)
    return 1 if remote.down is not None or result.unreadable else 0


def attach_for_base(ws: Workspace, url: str | None, ref: str) -> None:
    """plan --base: a pull request cannot redirect the remote its CI reads. Unless the job pins one
    (--remote, NPUCTL_REMOTE), a `.npuctl.yaml` whose remote differs from `ref`'s is not followed:
    the run warns and reads `ref`'s remote (none if `ref` has none)."""
    import os
    import tempfile

    from reconciler.gitops.gitref import GitError, blob_text, open_repo, resolve
    from reconciler.remote import ConfigError, Remote
    from reconciler.remote.config import CONFIG_FILE, ENV_URL, RemoteConfig, read_file

    root = ws.layout.root
    if url or os.environ.get(ENV_URL):
        return attach(ws, url, fetch=False)
    try:
        text = blob_text(resolve(open_repo(root), ref), CONFIG_FILE)
    except GitError:
        return attach(ws, url, fetch=False)  # the comparison reports the ref
    base: RemoteConfig | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if text is not None:
            (Path(tmp) / CONFIG_FILE).write_text(text)
            try:
                base = read_file(Path(tmp))
            except ConfigError:
                base = None
    try:
        head = read_file(root)
    except ConfigError:
        head = None  # attach warns about it below, or the base's is used
    same = (base is None and head is None) or (
        base is not None
        and head is not None
        and (base.url, base.options, base.push) == (head.url, head.options, head.push)
    )
    if same:
        return attach(ws, url, fetch=False)
    warn(
        f"{CONFIG_FILE} changes the remote cache against {ref}: not followed, plan reads {ref}'s "
        f"({base.url if base else 'none'}); pin the remote in CI with {ENV_URL}"
    )
    ws.remote = Remote(base, warn) if base is not None else None
    ws.remote_fetch = False
