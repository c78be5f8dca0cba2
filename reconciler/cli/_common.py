"""What the engine commands share: output options, loading specs, opening state, progress."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from backends.sdk.vocab import Tone
from reconciler.cli import _specargs
from reconciler.engine import health
from reconciler.engine.reporter import Reporter
from reconciler.engine.results import SpecResult, StageResult
from reconciler.repo import Layout, find_root

if TYPE_CHECKING:
    from reconciler.engine.eta import Estimator
    from reconciler.state.lockread import LockView

F = TypeVar("F", bound=Callable[..., Any])


def output_options(markdown: bool = True) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        choices = ["text", "json", "markdown"] if markdown else ["text", "json"]
        func = click.option(
            "--format", "fmt", type=click.Choice(choices), default="text", help="Output format."
        )(func)
        func = click.option(
            "--json", "as_json", is_flag=True, help="Machine output (same as --format json)."
        )(func)
        return func

    return decorate


paths_argument = _specargs.argument


def find_spec(spec: str, root: Path) -> Path:
    """The file of the one spec `spec` names: a spec file, a folder holding one spec, or a spec name
    (reconciler.cli._specargs; UnknownSpec, exit 1, when it names none)."""
    return _specargs.one(spec, root)


def spec_lock(spec: str, command: str) -> tuple[Path, LockView] | None:
    """(repository root, lock file) of the spec named or pointed at; None after saying why on stderr."""
    from reconciler.state import lockread

    root = find_root(Path.cwd())
    path = find_spec(spec, root)
    lock = lockread.read(Layout.lock_file(path))
    if lock is None:
        click.echo(f"npuctl {command}: {spec}: no lock file: run `npuctl apply` first", err=True)
        return None
    return root, lock


def chosen_format(fmt: str, as_json: bool) -> str:
    return "json" if as_json else fmt


@dataclass
class Loaded:
    root: Path
    specs: list[Any]
    invalid: list[SpecResult]


def load(
    paths: tuple[Path, ...], semantic: bool = True, siblings: bool = True, cached: bool = True
) -> Loaded:
    """Every spec under the paths; invalid ones become Stalled results carrying their errors.
    `siblings`, `cached`: as reconciler.spec.check."""
    from reconciler.spec import check

    root = find_root(Path.cwd())
    targets = list(paths) or [Layout(root).default_specs()]
    specs, invalid = [], []
    reports = check(targets, root, semantic=semantic, siblings=siblings, cached=cached)
    from reconciler.cli import _ci

    _ci.annotate(_ci.spec_error_annotations(e for r in reports for e in r.errors))
    for report in reports:
        if report.valid:
            specs.append(report.spec)
            continue
        name = report.name or report.file.name.split(".")[0]
        result = SpecResult(name, str(report.file), "", status=health.STALLED)
        result.errors.extend(str(e) for e in report.errors)
        if report.spec is not None:
            result.target = report.spec.target
        invalid.append(result)
    return Loaded(root, specs, invalid)


def interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


def eta_text(seconds: float | None) -> str:
    """`~45 s left`, `~3 min left`; empty without an estimate."""
    if seconds is None:
        return ""
    if seconds < 1:
        return "finishing (over its usual time)"
    return f"~{seconds:.0f} s left" if seconds < 90 else f"~{seconds / 60:.0f} min left"


class ProgressReporter(Reporter):
    """A rich progress bar per spec on a terminal; silent otherwise (CI logs stay clean). With an
    estimator, a long stage's line says how long it has left (reconciler.engine.eta)."""

    def __init__(self, estimator: Estimator | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class EtaColumn(ProgressColumn):
            def render(self, task: Task) -> Text:
                left = task.fields.get("left")
                return Text(eta_text(left() if left is not None else None), style="progress.remaining")

        self.console = Console(stderr=True)
        self.estimator = estimator
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[stage]}", markup=False),  # "[default]" is a variant, not a style
            TimeElapsedColumn(),
            EtaColumn(),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}

    def spec_started(self, spec: str, total_stages: int) -> None:
        self.tasks[spec] = self.progress.add_task(spec, total=total_stages, stage="", left=None)

    def stage_started(self, spec: str, variant: str, stage: str) -> None:
        left: Callable[[], float | None] | None = None
        estimator = self.estimator
        if estimator is not None:
            estimator.start(spec, variant, stage)

            def left() -> float | None:
                return estimator.left(spec, variant, stage)

        self.progress.update(self.tasks[spec], stage=f"{stage} [{variant}]", left=left)

    def stage_finished(self, spec: str, result: StageResult) -> None:
        self.progress.advance(self.tasks[spec])

    def spec_finished(self, result: SpecResult) -> None:
        """A spec that stopped (Stalled, Failed) keeps its bar where it stopped, with the state in red;
        only a spec that got through every stage shows a full bar."""
        task = self.tasks.get(result.name)
        if task is None:
            return
        stopped = result.status in (health.STALLED, health.FAILED)
        colour = health.TONE.get(result.status, Tone.UNSURE).colour
        total = self.progress.tasks[task].total
        self.progress.update(
            task,
            stage=f"[{colour}]{result.status}[/{colour}]",
            left=None,
            completed=self.progress.tasks[task].completed if stopped else total,
        )

    def waiting(self, what: str, holder: str) -> None:
        self.console.print(f"waiting for lock on {what}: held by {holder}")

    def warning(self, message: str) -> None:
        self.console.print(f"npuctl: warning: {message}", markup=False, highlight=False)


@contextmanager
def reporter(estimator: Estimator | None = None) -> Iterator[Reporter]:
    if not interactive():
        from reconciler.cli._heartbeat import HeartbeatReporter

        yield HeartbeatReporter()
        return
    progress = ProgressReporter(estimator)
    with progress.progress:
        yield progress
