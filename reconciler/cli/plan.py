"""npuctl plan: exit 0 nothing to do, 2 changes pending, 1 error (Terraform's -detailed-exitcode);
with `--fail-on-regression`, 3 when an SLO that passed would no longer pass (or a new one would fail)
under the spec's thresholds and the recorded measurements. A lock file that fails its integrity
checks is an error (1).

With `--base REF` (a pull request's target branch) each spec is also compared with the same spec at
REF, read from git without touching the work tree: the field-level diff, the stages that rebuild, and
the SLO table base -> now once the lock file is applied. The exit code stays the plan's.

With `-out FILE` the plan is also saved (reconciler.engine.saved_plan): `apply FILE` then builds exactly
it, or refuses when a spec, lock file or input changed since.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler.cli import _common, _remote, _render, _replay
from reconciler.engine.results import SpecResult

if TYPE_CHECKING:
    from reconciler.engine.settled import Settled
    from reconciler.engine.workspace import Workspace


def exit_code(results: list[SpecResult], fail_on_regression: bool = False) -> int:
    from reconciler.engine.predict import regressions

    if any(r.errors or r.lock_problems or any(s.action == "stalled" for s in r.stages) for r in results):
        return 1
    if fail_on_regression and regressions(results):
        return 3
    if any(s.action != "cached" for r in results for s in r.stages):
        return 2
    return 0


@click.command(help="Show, per spec and stage, what apply would build, reuse or re-judge.")
@_common.paths_argument
@click.option(
    "--base",
    "base_ref",
    metavar="REF",
    default=None,
    help="Also compare every spec with its version at this git revision (e.g. origin/main): "
    "field diff, stages to rebuild, SLO old/new/delta.",
)
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 3 when any SLO would regress (pass -> fail) on the recorded measurements: a CI gate.",
)
@click.option(
    "-out",
    "--out",
    "out",
    metavar="FILE",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Save the plan to FILE; `npuctl apply FILE` then builds exactly it, and refuses if a spec, "
    "lock file or input changed since.",
)
@_remote.remote_option
@_common.output_options()
def command(
    paths: tuple[Path, ...],
    base_ref: str | None,
    fail_on_regression: bool,
    out: Path | None,
    remote_url: str | None,
    fmt: str,
    as_json: bool,
) -> int:
    started = time.monotonic()
    chosen = _common.chosen_format(fmt, as_json)
    replayable = base_ref is None and remote_url is None and not fail_on_regression and out is None
    if replayable:
        replayed = _replay.replay("plan", paths, chosen, started)
        if isinstance(replayed, _replay.Partial):
            replayed = _plan_partly(replayed, paths, chosen, started)
        if replayed is not None:
            return replayed
    from reconciler.cli import _ci
    from reconciler.engine.plan import plan_settled
    from reconciler.engine.workspace import Workspace

    loaded = _common.load(paths)
    ws = Workspace.open(loaded.root, reading=True)
    try:
        if base_ref is None:
            _remote.attach(ws, remote_url, fetch=False)
        else:
            _remote.attach_for_base(ws, remote_url, base_ref)
            if not _base_trust(ws, base_ref):
                return 1
        planned, settled = plan_settled(ws, loaded.specs)
        results = loaded.invalid + planned
        if out is not None:
            _save(ws, loaded, planned, out)
        if base_ref is None:
            pieces = [_render.Piece.of(r, chosen) for r in results]
            shown = printed(pieces, results, chosen, fail_on_regression)
            code = _replay.show(shown, time.monotonic() - started)
            if replayable and not loaded.invalid:
                keep(ws, settled, loaded, paths, chosen, results, pieces)
            return code
        code = _with_base(ws, paths, base_ref, loaded, results, chosen, fail_on_regression)
    finally:
        ws.close()
    click.echo(
        _ci.summary_line(results, "plan", time.monotonic() - started) + f"; exit {code}", err=chosen != "text"
    )
    return code


def _plan_partly(partial: _replay.Partial, paths: tuple[Path, ...], fmt: str, started: float) -> int | None:
    """The plan of the changed specs, read and planned, printed with the stored pieces of the others;
    None (nothing printed) where the full path must decide: a changed spec that no longer loads as
    one, a name now claimed twice, a remote."""
    if not partial.changed:
        pieces = [p for p in partial.pieces if p is not None]
        return _replay.show(printed(pieces, [], fmt), time.monotonic() - started)
    from reconciler.engine.plan import plan_read
    from reconciler.engine.workspace import Workspace

    loaded = _common.load(tuple(Path(f) for f in partial.changed), siblings=False, cached=not partial.edited)
    if loaded.invalid or {str(s.path) for s in loaded.specs} != set(partial.changed):
        return None
    ws = Workspace.open(loaded.root, reading=True)
    try:
        _remote.attach(ws, None, fetch=False)
        if ws.remote is not None:
            return None
        results, settled = plan_read(ws, loaded.specs, [Path(f) for f in partial.order], partial.stats)
        fresh = {str(s.path): _render.Piece.of(r, fmt) for s, r in zip(loaded.specs, results, strict=True)}
        pieces = [
            p if p is not None else fresh[f] for f, p in zip(partial.order, partial.pieces, strict=True)
        ]
        if len({p.name for p in pieces}) != len(pieces):
            return None  # the full path names both files
        code = _replay.show(printed(pieces, results, fmt), time.monotonic() - started)
        _replay.record_partly(settled, partial, fresh)
        return code
    finally:
        ws.close()


def _save(ws: Workspace, loaded: _common.Loaded, planned: list[SpecResult], out: Path) -> None:
    from reconciler.engine import saved_plan

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(saved_plan.save(ws, loaded.specs, planned).to_json(), encoding="utf-8")
    click.echo(f"plan saved to {out}: `npuctl apply {out}` builds exactly this plan", err=True)


def printed(
    pieces: list[_render.Piece], results: list[SpecResult], fmt: str, fail_on_regression: bool = False
) -> _replay.Printed:
    """What plan prints: `pieces` (one a spec, in order); `results`, the specs planned in this run
    (those printed from a stored piece were settled: nothing to build, no error), decide the exit
    code and the regressions."""
    from reconciler.cli import _ci
    from reconciler.engine.predict import regressions

    err = (
        [f"npuctl plan: SLO would regress: {line}" for line in regressions(results)]
        if fail_on_regression
        else []
    )
    code = exit_code(results, fail_on_regression)
    return _replay.Printed(
        [_render.assemble(pieces, fmt, "plan")],
        err,
        _ci.summary_of([p.tally for p in pieces], "plan"),
        {"": code},
        fmt != "text",
    )


def keep(
    ws: Workspace,
    settled: Settled,
    loaded: _common.Loaded,
    paths: tuple[Path, ...],
    fmt: str,
    results: list[SpecResult],
    pieces: list[_render.Piece] | None = None,
) -> None:
    """What each settled spec's result stands on and its piece of the plan's output, for the next
    identical invocation; with the apply's output when every spec is settled."""
    from reconciler.cli import apply as apply_command
    from reconciler.engine.settled import is_settled

    kept: dict[str, _replay.Printed] = {}
    if all(is_settled(r) for r in results):
        applied = [settled.get(spec, "apply") for spec in loaded.specs]
        done = [r for r in applied if r is not None]
        if len(done) == len(applied):
            kept = {"apply": apply_command.printed(loaded.root, done, loaded.specs, fmt)}
    shown = pieces if pieces is not None else [_render.Piece.of(r, fmt) for r in results]
    by_file = {str(s.path): piece for s, piece in zip(loaded.specs, shown, strict=True)}
    _replay.record(ws, settled, by_file, paths, fmt, kept)


def _say_regressions(results: list[SpecResult], fail_on_regression: bool) -> None:
    from reconciler.engine.predict import regressions

    if fail_on_regression:
        for line in regressions(results):
            click.echo(f"npuctl plan: SLO would regress: {line}", err=True)


def _base_trust(ws: Workspace, ref: str) -> bool:
    """Judges records by the base revision's trust policy; False (said) when REF cannot be read."""
    from reconciler.gitops.compare import base_policy
    from reconciler.gitops.gitref import GitError
    from reconciler.trust.signing import Trust

    try:
        ws.trust = Trust(base_policy(ws.layout.root, ref), ws.trust.own)
    except GitError as exc:
        click.echo(f"npuctl plan --base: {exc}", err=True)
        return False
    return True


def _with_base(
    ws: Workspace,
    paths: tuple[Path, ...],
    ref: str,
    loaded: _common.Loaded,
    results: list[SpecResult],
    fmt: str,
    fail_on_regression: bool = False,
) -> int:
    from reconciler.gitops import render
    from reconciler.gitops.compare import compare
    from reconciler.gitops.gitref import GitError

    try:
        comparison = compare(ws, list(paths), ref, loaded.specs, results)
    except GitError as exc:
        click.echo(f"npuctl plan --base: {exc}", err=True)
        return 1
    code = exit_code(results, fail_on_regression)
    _say_regressions(results, fail_on_regression)
    if fmt == "json":
        click.echo(render.to_json(results, comparison))
    elif fmt == "markdown":
        click.echo(render.to_markdown(comparison, code), nl=False)
    else:
        _render.print_text(results, "plan")
        render.print_text(comparison)
    return code
