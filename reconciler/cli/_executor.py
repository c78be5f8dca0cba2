"""`-j`, `--executor` and `--address`: which executor an apply runs its specs through."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from reconciler.engine.executors import Executor

F = TypeVar("F", bound=Callable[..., Any])


def options(func: F) -> F:
    func = click.option(
        "--address",
        default=None,
        metavar="ADDRESS",
        help="Ray cluster address for --executor ray (default `local`: a private cluster on 127.0.0.1).",
    )(func)
    func = click.option(
        "--executor",
        "executor_name",
        type=click.Choice(["local", "ray"]),
        default="local",
        help="Where specs build: worker processes here (default) or long-lived Ray actors, one spec at a time each.",
    )(func)
    func = click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        default=None,
        help="Specs built at once (bounded by cores and memory); default 1 locally, the cores with Ray.",
    )(func)
    return func


def early(name: str, jobs: int | None, address: str | None, paths: tuple[Path, ...]) -> Executor | None:
    """`make`, before the run loads its specs: the workers (Ray's above all, whose processes the
    cluster starts after the driver joins) get ready while this process validates and plans, instead
    of after it. Bounded by the spec files under `paths`, valid or not."""
    if name == "local" and address is None and (jobs is None or jobs <= 1):
        return None
    from reconciler.repo import Layout, find_root
    from reconciler.spec._discover import discover_with_errors

    root = find_root(Path.cwd())
    files, _ = discover_with_errors(list(paths) or [Layout(root).default_specs()], root)
    return make(name, jobs, address, Layout(root).state_dir, len(files))


def make(name: str, jobs: int | None, address: str | None, state_dir: Path, specs: int) -> Executor | None:
    """None: the specs run one after another in this process (`-j 1`, the default). Never more
    workers than the run's `specs`: workers start before the first spec, and an idle one costs its
    start-up."""
    if name == "ray":
        from reconciler.cli._remote import warn
        from reconciler.engine.ray_executor import RayExecutor
        from reconciler.engine.ray_session import Unreachable

        wanted = min(jobs or os.cpu_count() or 1, max(1, specs))
        try:
            return RayExecutor(address or "local", wanted, state_dir, warn)
        except ImportError:
            raise click.ClickException("--executor ray needs Ray: pip install 'npuctl[ray]'") from None
        except Unreachable as exc:
            raise click.ClickException(str(exc)) from None
    if address is not None:
        raise click.UsageError("--address is only for --executor ray")
    if jobs is None or min(jobs, specs) <= 1:
        return None
    from reconciler.engine.executors import LocalPool

    return LocalPool(min(jobs, specs))
