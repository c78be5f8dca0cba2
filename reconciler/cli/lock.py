"""`npuctl lock`: lock files under git. `install-merge-driver` makes git merge them record by record;
`merge` is the driver git runs (reconciler.gitops.lockmerge)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group(help="Lock files under git: the merge driver and its installation.")
def command() -> None:
    pass


@command.command("install-merge-driver", help="Make git merge *.lock.json record by record (once per clone).")
def install_merge_driver() -> int:
    from reconciler.gitops.mergedriver import install
    from reconciler.repo import find_root

    try:
        done = install(find_root(Path.cwd()))
    except OSError as exc:
        raise click.ClickException(f"cannot install the merge driver: {exc}") from None
    for line in done:
        click.echo(f"npuctl lock: {line}")
    return 0


@command.command(
    "merge",
    help="git's merge driver: merge THEIRS into OURS (rewritten in place), BASE the common ancestor; "
    "exit 0 with a valid lock, records changed on both sides dropped for a rebuild and named.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("ours", type=click.Path(path_type=Path))
@click.argument("theirs", type=click.Path(path_type=Path))
@click.argument("name", required=False, default="")
def merge(base: Path, ours: Path, theirs: Path, name: str) -> int:
    from reconciler.gitops.lockmerge import merge as merge_locks
    from reconciler.state import lockfile

    shown = name or str(ours)
    try:
        sides = [lockfile.parse(Path(shown), path.read_bytes()) for path in (ours, theirs)]
        base_bytes = base.read_bytes()
        common = lockfile.parse(Path(shown), base_bytes) if base_bytes.strip() else {}
    except lockfile.LockUnreadable as exc:
        click.echo(f"npuctl lock merge: {exc}; left to git as a conflict", err=True)
        return 1
    merged = merge_locks(common, *sides)
    ours.write_text(lockfile.dumps(merged.lock))
    for line in merged.dropped:
        click.echo(
            f"npuctl lock merge: {shown}: {line}: record dropped, `npuctl apply` rebuilds it", err=True
        )
    return 0
