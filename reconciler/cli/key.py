"""npuctl key: this machine's signing key (reconciler.trust.keys), and signing committed locks with it.

`generate` makes the key (never overwriting one), `show` prints its public key as a trust-policy entry,
`path` where it is kept, `sign-locks` signs the lock files' records again (reconciler.engine.relock).
"""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli import _common


@click.group(help="This machine's signing key, and signing committed lock files with it.")
def command() -> None:
    pass


def _entry(name: str, public: str) -> str:
    return f"  - name: {name}\n    key: {public}"


@command.command(help="Make this machine's signing key (an existing key is never replaced).")
def generate() -> int:
    from reconciler.trust import keys

    if keys.os.environ.get(keys.ENV_KEY):
        raise click.ClickException(f"${keys.ENV_KEY} holds the key: nothing to generate")
    path = keys.key_path()
    if path.exists():
        raise click.ClickException(f"{path}: a key is already there (never replaced)")
    key = keys.generate(path)
    click.echo(f"wrote {path}\npublic key: {key.public.text}")
    return 0


@command.command(help="Print the public key, as an entry for npuctl-trust.yaml (made on first need).")
@click.option("--name", default="my-machine", show_default=True, help="The name the entry gives the key.")
def show(name: str) -> int:
    from reconciler.trust import keys

    key = keys.machine_key(create=True)
    assert key is not None
    click.echo(
        f"# {key.source}; add to npuctl-trust.yaml under trusted-keys:\n{_entry(name, key.public.text)}"
    )
    return 0


@command.command(help="Print where the signing key is kept (NPUCTL_SIGNING_KEY_FILE or the config dir).")
def path() -> int:
    from reconciler.trust import keys

    click.echo(f"${keys.ENV_KEY}" if keys.os.environ.get(keys.ENV_KEY) else str(keys.key_path()))
    return 0


@command.command(
    "sign-locks",
    help="Sign the lock files' records again with this machine's key: records whose integrity holds "
    "and that this machine trusts (with --adopt-unsigned, also unsigned ones: you vouch for them).",
)
@_common.paths_argument
@click.option("--adopt-unsigned", is_flag=True, help="Also sign records that carry no signature yet.")
def sign_locks(paths: tuple[Path, ...], adopt_unsigned: bool) -> int:
    from reconciler.engine.relock import sign_locks as run
    from reconciler.repo import Layout
    from reconciler.trust import policy
    from reconciler.trust.signing import Trust

    loaded = _common.load(paths, semantic=False)
    trust = Trust.here(policy.read(loaded.root))
    lines, whole = run(trust, [Layout.lock_file(s.path) for s in loaded.specs], adopt_unsigned)
    for line in lines:
        click.echo(line)
    return 0 if whole else 1
