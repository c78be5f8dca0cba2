"""The `npuctl` command: a click group whose subcommands live one per module and load lazily.

Lazy loading keeps `npuctl --help` and `npuctl validate` fast: no toolchain, and not even the engine,
is imported until a command that needs it runs.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path

import click

COMMANDS: dict[str, str] = {
    "validate": "Check specs (schema and semantics) without building.",
    "plan": "Show, per spec and stage, what apply would build, reuse or re-judge.",
    "apply": "Build what changed, measure, judge SLOs, write lock files.",
    "status": "Sync (Synced / OutOfSync / Unknown) and health (Healthy / Degraded / Progressing / Unknown) per spec.",
    "explain": "Why a stage is (not) up to date: its key's inputs, field by field.",
    "gc": "Remove store objects nothing refers to.",
    "fsck": "Verify the store, database and lock files; quarantine and rebuild what is corrupt.",
    "init": "Write a starter spec for an ONNX model.",
    "targets": "List the target catalog, or show one target.",
    "watch": "Watch specs and their inputs; re-plan and apply what changed, cancelling stale builds.",
    "audit": "Which model version met which SLO, from the lock files' git history and the ledger.",
    "report": "Write a self-contained HTML report for a spec: placement, latency, sensitivity, SLO history.",
    "toolchain": "Install or list managed toolchain environments.",
    "backends": "List the registered backends (built-in and plug-ins): targets, toolchain state, evidence here.",
    "artifacts": "List a spec's deployable files: names, sizes, digests, where they are.",
    "push": "Push every stage the lock files record to the remote cache.",
    "pull": "Pull every stage the lock files record from the remote cache (verified).",
    "lock": "Lock files under git: `lock install-merge-driver` makes git merge them record by record.",
    "export": "Copy a spec's deployable files (verified) into a folder, with a manifest and SHA256SUMS.",
    "key": "This machine's signing key (generate, show, path) and signing committed lock files with it.",
}
"""Subcommand name -> one-line help; the implementation is `reconciler.cli.<name>:command`."""


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"reconciler.cli.{cmd_name}")
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS.get(name, "")) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="npuctl")
def cli() -> None:
    """npuctl: deploy ONNX models to NPUs from declarative specs, rebuilding only what changed."""


def _honour_watch_cancel() -> None:
    """An apply the watcher started must stop on its SIGINT (it then cleans its work folders). A
    process started with SIGINT ignored (a script's background job: `npuctl watch &`, or a test
    runner's worker) passes SIG_IGN on, and Python then keeps it: every cancel waited out its grace
    and was SIGKILLed. The watcher marks its children (NPUCTL_WATCH_CHILD), and they take SIGINT back."""
    import signal

    if os.environ.get("NPUCTL_WATCH_CHILD") and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: raised in the main thread so that every `finally` runs (work folders
    removed, locks released, the database closed) and the command ends with one line. Not a
    KeyboardInterrupt, which click answers with an extra blank line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_on_signals() -> None:
    """SIGTERM (a CI runner cancelling a job, `kill`) stops like Ctrl-C instead of killing outright;
    a signal the process was started with ignored stays ignored."""
    import signal

    def stop(signum: int, frame: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)  # a second signal ends the cleanup too
        raise Stopped(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, stop)


def _stopped_line(signum: int) -> str:
    import signal

    name = signal.Signals(signum).name
    return f"npuctl: stopped by {name}: the work in progress was discarded and its work folders removed"


YOUNG_GC_THRESHOLD = 100_000
"""Allocations between two passes of the cycle collector over new objects (CPython's default: 700).
What a command allocates is mostly kept until it ends (the loaded specs, the records and caches it
reads once), so each pass finds little to free, and each pass that reaches the older generations
walks all of them again: with the default, a cold `validate` of 10,000 specs spent a third of its CPU
time in the collector. Garbage cycles are still collected, less often."""


def main() -> None:
    """Console entry point; each command returns its exit code."""
    import gc

    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    _honour_watch_cancel()
    _stop_on_signals()
    from reconciler.cli._quiet import quiet_third_party

    quiet_third_party()
    try:
        rc = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(1 if exc.exit_code == 2 else exc.exit_code)
    except Stopped as exc:
        click.echo(_stopped_line(exc.signum), err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("NPUCTL_DEBUG"):
            traceback.print_exc()
        from backends.sdk.pathpolicy import PathRefused
        from reconciler.engine import faults
        from reconciler.state.lockfile import LockUnreadable
        from reconciler.trust.keys import KeyProblem
        from reconciler.trust.policy import PolicyError

        if isinstance(exc, (LockUnreadable, PolicyError, KeyProblem)):
            click.echo(f"npuctl: {exc}", err=True)
            sys.exit(1)
        if isinstance(exc, PathRefused) or faults.is_infrastructure(exc):
            said = exc if isinstance(exc, PathRefused) else faults.describe(exc, _database())
            click.echo(f"npuctl: {said}", err=True)
            sys.exit(1)
        click.echo(
            f"npuctl: internal error: {type(exc).__name__}: {exc} (set NPUCTL_DEBUG=1 for details)", err=True
        )
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)


def _database() -> Path | None:
    """The state database of the repository here (what an SQLite error, which names no path, is about)."""
    try:
        from reconciler.repo import Layout, find_root

        return Layout(find_root(Path.cwd())).database
    except Exception:
        return None
