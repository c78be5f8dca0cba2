"""npuctl apply: exit 0 built and no SLO failed, 3 an SLO failed or has no evidence, 1 error; with
`--locked`, 2 when a committed lock file would change (nothing is built or written: the lock files are
named, as plan's 2 names changes pending).

The rule for "not verifiable here": an SLO judged on evidence this machine cannot re-verify (carried
over from the committed lock because the toolchain is missing, or met only on an estimate because the
device is absent) does not fail apply; its health reads Unknown or carries the "carried over" mark,
never a plain pass. `--strict` makes apply exit 3 unless every SLO passed on a measurement.

`apply FILE`, FILE saved by `plan -out`, applies that plan's specs after checking that nothing it stood
on changed (reconciler.engine.saved_plan); a stale plan is refused with exit 1 and one line.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from backends.sdk.vocab import Verdict
from reconciler.cli import _common, _executor, _remote, _render, _replay
from reconciler.engine.results import SpecResult

if TYPE_CHECKING:
    from reconciler.engine.eta import Estimator
    from reconciler.engine.locked import StaleLock
    from reconciler.engine.workspace import Workspace


def exit_code(results: list[SpecResult], strict: bool = False) -> int:
    if any(r.failed for r in results):
        return 1
    verdicts = [v for r in results for v in r.slo]
    if any(v.passed is False or v.verdict == Verdict.UNVERIFIED.word for v in verdicts):
        return 3
    if strict and any(v.passed is not True or v.carried_over for v in verdicts):
        return 3
    return 0


@click.command(
    help="Build what changed, measure, judge SLOs, write lock files. PATH may be a plan file saved by "
    "`npuctl plan -out FILE`: apply then builds exactly that plan, or refuses it if it is stale."
)
@_common.paths_argument
@click.option(
    "--remeasure",
    is_flag=True,
    help="Re-run evaluate on this machine even where the lock records measurements for the same key; "
    "the lock then keeps the other runner's measurements beside this one's.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 3 unless every SLO passed on a measurement taken for this build (no estimate, nothing "
    "carried over).",
)
@click.option(
    "--locked",
    is_flag=True,
    help="Fail (exit 2) without building or writing anything when any committed lock file would "
    "change: the lock files are the truth, as `npm ci` or Terraform's -lockfile=readonly (for CI).",
)
@_remote.remote_option
@_executor.options
@_common.output_options()
def command(
    paths: tuple[Path, ...],
    remeasure: bool,
    strict: bool,
    locked: bool,
    remote_url: str | None,
    jobs: int | None,
    executor_name: str,
    address: str | None,
    fmt: str,
    as_json: bool,
) -> int:
    started = time.monotonic()
    chosen = _common.chosen_format(fmt, as_json)
    if locked and remeasure:
        raise click.UsageError("--locked and --remeasure exclude each other (--remeasure rewrites the lock)")
    plan_file = paths[0] if paths else None
    saved = _saved_plan(paths)
    if saved is not None:
        paths = saved
    replayable = saved is None and remote_url is None
    if replayable and not remeasure and executor_name == "local" and jobs in (None, 1) and address is None:
        replayed = _replay.replay("apply", paths, chosen, started, "strict" if strict else "")
        if isinstance(replayed, int):
            return replayed
    from reconciler.engine.apply import apply_all, lock_stats
    from reconciler.engine.workspace import Workspace

    executor = _executor.early(executor_name, jobs, address, paths)
    try:
        loaded = _common.load(paths)
        ws = Workspace.open(loaded.root)
        try:
            if locked:
                from reconciler.engine.locked import stale_locks

                stale = stale_locks(ws, loaded.specs)
                if stale:
                    return _refused(loaded.root, stale, loaded, chosen)
            _remote.attach(ws, remote_url)
            if saved is not None and plan_file is not None and not _still_current(ws, plan_file, loaded):
                return 1
            locks_before = lock_stats(loaded.specs)
            with _common.reporter(_estimator(ws, loaded)) as reporter:
                results = loaded.invalid + apply_all(
                    ws, loaded.specs, reporter, remeasure=remeasure, executor=executor
                )
            if executor is not None:  # its workers are done: closed before the settled cache is written
                executor.close()
                executor = None
            _remember_settled(ws, loaded, results, locks_before, paths, chosen, replayable)
        finally:
            ws.close()
    finally:
        if executor is not None:
            executor.close()
    if ws.close_warning:
        click.echo(f"npuctl: warning: {ws.close_warning}", err=True)
    shown = printed(loaded.root, results, loaded.specs, chosen)
    return _replay.show(shown, time.monotonic() - started, "strict" if strict else "")


def _remember_settled(
    ws: Workspace,
    loaded: _common.Loaded,
    results: list[SpecResult],
    locks_before: list[Any],
    paths: tuple[Path, ...],
    chosen: Any,
    replayable: bool,
) -> None:
    """Plans what this apply changed so the next plan finds it settled (reconciler.engine.apply.settle).
    A cache, so best effort: a full disk or an unwritable state costs the next plan its full path, never
    this apply's result (the failure is said once)."""
    from reconciler.engine import faults
    from reconciler.engine.apply import settle

    try:
        after = settle(ws, loaded.specs, results[len(loaded.invalid) :], locks_before)
        if after is not None and after[1].added and replayable and not loaded.invalid:
            from reconciler.cli.plan import keep

            keep(ws, after[1], loaded, paths, chosen, after[0])
    except Exception as exc:
        if not faults.is_infrastructure(exc):
            raise
        click.echo(
            f"npuctl: warning: the settled cache was not saved: {faults.describe(exc, ws.layout.database)}",
            err=True,
        )


def _estimator(ws: Workspace, loaded: _common.Loaded) -> Estimator | None:
    """The stages' ETAs, on a terminal only (the CI log's heartbeat lines have none)."""
    if not _common.interactive():
        return None
    from reconciler.engine.eta import Estimator

    return Estimator.load(ws.db, ((spec.name, spec.target) for spec in loaded.specs))


def _saved_plan(paths: tuple[Path, ...]) -> tuple[Path, ...] | None:
    """The plan file when the one path given is one: returned with the spec files it planned after it,
    so the run loads exactly those."""
    from reconciler.engine import saved_plan
    from reconciler.repo import find_root

    if len(paths) != 1 or not saved_plan.is_plan_file(paths[0]):
        return None
    try:
        plan = saved_plan.read(paths[0])
    except saved_plan.PlanFileError as exc:
        raise click.ClickException(str(exc)) from None
    if not plan.specs:
        raise click.ClickException(f"{paths[0]}: the plan holds no spec")
    return tuple(plan.spec_files(find_root(Path.cwd())))


def _still_current(ws: Workspace, plan_file: Path, loaded: _common.Loaded) -> bool:
    """False, after one line on stderr naming what changed, when the saved plan is stale."""
    from reconciler.engine import saved_plan
    from reconciler.engine.plan import plan_all

    if loaded.invalid:
        broken = loaded.invalid[0]
        why: str | None = f"{broken.file}: the spec is no longer valid: {(broken.errors or [''])[0]}"
    else:
        why = saved_plan.stale(ws, saved_plan.read(plan_file), loaded.specs, plan_all(ws, loaded.specs))
    if why is not None:
        click.echo(f"npuctl apply: the saved plan is stale, run `npuctl plan -out` again: {why}", err=True)
        return False
    return True


def printed(root: Path, results: list[SpecResult], specs: list[Any], fmt: str) -> _replay.Printed:
    """What apply prints: the results, where the artifacts are (text), CI annotations, the summary."""
    from reconciler.cli import _ci

    out = [_render.render(results, fmt, "apply")]
    if fmt == "text":
        from reconciler.cli.artifacts import where_lines

        out += where_lines(root, list(results))
    err = _ci.result_annotations(results, specs) if _ci.github_actions() else []
    codes = {"": exit_code(results), "strict": exit_code(results, strict=True)}
    return _replay.Printed(out, err, _ci.summary_counts(results, "apply"), codes, fmt != "text")


LOCKED_ADVICE = "run `npuctl apply` and commit the lock files it writes"


def _refused(root: Path, stale: list[StaleLock], loaded: _common.Loaded, fmt: str) -> int:
    """apply --locked found lock files that would change: each named (stdout in the chosen format,
    stderr, a CI annotation on the lock file), nothing built or written; exit 2, or 1 when a spec is
    also invalid or a lock file cannot be read (an error outranks a stale lock, as in apply's own exit
    codes)."""
    from reconciler.cli import _ci
    from reconciler.engine import health

    by_name = {s.name: s for s in loaded.specs}
    results = list(loaded.invalid)
    for entry in stale:
        lock = _ci_path(root, entry.lock)
        spec = by_name[entry.spec]
        result = SpecResult(entry.spec, str(spec.path), spec.target)
        result.status, result.sync, result.health = health.OUT_OF_SYNC, health.OUT_OF_SYNC, health.UNKNOWN
        result.errors = [f"{lock} would change: {why}" for why in entry.reasons]
        results.append(result)
        for why in entry.reasons:
            click.echo(f"npuctl apply --locked: {lock} would change: {why}", err=True)
        if _ci.github_actions():
            message = f"the committed lock file would change: {'; '.join(entry.reasons)}; {LOCKED_ADVICE}"
            click.echo(_ci.annotation("error", message, lock, title=f"npuctl: {entry.spec}"), err=True)
    head = (
        f"apply --locked: {len(stale)} lock file(s) would change; nothing was built or written: "
        f"{LOCKED_ADVICE}."
    )
    if fmt == "markdown":
        click.echo(f"**npuctl {head}**\n")
    elif fmt == "text":
        click.echo(head)
    click.echo(_render.render(results, fmt, "apply"))
    return 1 if loaded.invalid or any(entry.unreadable for entry in stale) else 2


def _ci_path(root: Path, path: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
