"""`npuctl export SPEC DIR`: the deployable files under their real names, a manifest and SHA256SUMS.

With `--rev REV`, a past release's files without a checkout: the spec's lock file is read at REV from
git, every artifact it records is taken from the local store or fetched from the remote cache by its
digest, and each byte written is verified against that digest.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler.cli import _common, _remote

if TYPE_CHECKING:
    from reconciler.state.lockread import LockView


@click.command(help="Copy a spec's deployable files (verified) into DIR, with manifest.json and SHA256SUMS.")
@click.argument("spec")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option(
    "--rev",
    metavar="REV",
    default=None,
    help="The files a past commit's lock file records (a tag, branch or sha), from the local store or "
    "the remote cache, without checking REV out.",
)
@_remote.remote_option
def command(spec: str, dest: Path, rev: str | None, remote_url: str | None) -> int:
    from reconciler.engine.export import ExportError, deployables, export, fetched
    from reconciler.repo import Layout, find_root
    from reconciler.state.store import Store

    if rev is None:
        found_lock = _common.spec_lock(spec, "export")
        if found_lock is None:
            return 1
        root, lock = found_lock
    else:
        root = find_root(Path.cwd())
        at = _lock_at(root, rev, spec)
        if at is None:
            return 1
        lock = at
    store = Store(Layout(root).store)
    try:
        found = deployables(lock, store, root)
        if rev is not None and any(a.stored is None for v in found for a in v.artifacts):
            remote = _remote.open_for(root, remote_url)
            tmp = Layout(root).tmp

            def fetch(digest: str, size: int) -> bool:
                return remote is not None and remote.fetch_object(digest, size, store, tmp)

            found = fetched(found, store, fetch)
        written = export(found, dest, lock.spec, lock.target)
    except (ExportError, OSError) as exc:
        click.echo(f"npuctl export: {spec}{'@' + rev if rev else ''}: {exc}", err=True)
        return 1
    for file in written:
        click.echo(str(file))
    return 0


def _lock_at(root: Path, rev: str, spec: str) -> LockView | None:
    from reconciler.gitops.gitref import GitError
    from reconciler.gitops.revision import lock_at
    from reconciler.state.lockread import LockView

    try:
        return LockView.from_json(lock_at(root, rev, spec).lock)
    except GitError as exc:
        click.echo(f"npuctl export --rev: {exc}", err=True)
        return None
