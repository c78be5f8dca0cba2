"""apply: walk each chain, reuse what is recorded, build what is not, judge SLOs, write the lock file.

Recorded means in the local store or in the committed lock file under the same key; a stage recorded
only in the lock is rebuilt only when a later stage needs its bytes. One spec failing never stops the
others, and within a spec only the dependants of a failed stage are skipped. A terminal failure is
remembered by key: it is not retried until the stage's inputs change (the spec is Stalled). What
cannot run here keeps the committed evidence (reconciler.engine.lockwrite). Each variant's walk
of its chain is a reconciler.engine.chain_run.ChainRun.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from reconciler.engine import faults, health, schedule
from reconciler.engine.chain import build_chain, variants
from reconciler.engine.chain_run import ChainRun, WouldWrite
from reconciler.engine.execute import RetryPolicy
from reconciler.engine.executors import Executor, jobs_for
from reconciler.engine.lockwrite import (
    carried_entry,
    checked,
    lock_data,
    recorded_matches,
    variant_entry,
    with_other_runners,
)
from reconciler.engine.measurements import collect
from reconciler.engine.reporter import Reporter
from reconciler.engine.resolve import index_locks
from reconciler.engine.results import SpecResult
from reconciler.engine.settled import Settled
from reconciler.engine.sources import lock_sources
from reconciler.engine.verify import judge, not_trusted
from reconciler.engine.workspace import Workspace
from reconciler.records import measured
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors
from reconciler.state import lockfile, locks, statcache
from reconciler.state.lockfile import LockUnreadable
from reconciler.state.lockread import LockedVariant, LockIndex, LockView
from reconciler.trust.policy import PolicyError


def _judged(
    ws: Workspace, spec: LoadedSpec, run: ChainRun, result: SpecResult
) -> tuple[dict[str, Any], bool]:
    """The variant's lock entry, and whether it is of the spec as it is now (sync)."""
    variant = run.variant
    slo = spec.field("slo")
    if run.complete or not run.locked.raw:
        compile_failed = any(s.name == "compile" and s.action == "failed" for s in run.results)
        measurements = collect(run.records, compile_failed)
        verdicts = judge(slo, measured.measurements(measurements), variant.name)
        carried = any(c.startswith(f"{variant.name}/evaluate:") for c in run.carried)
        judged = [v.lock_json() for v in verdicts]
        entry = variant_entry(
            variant.inputs, run.records, judged, measurements, ws.trust, run.locked, run.dry
        )
        if run.remeasure and any(s.name == "evaluate" and s.action == "built" for s in run.results):
            entry = with_other_runners(entry, run.locked)
        synced = run.complete
    else:
        measurements = run.locked.raw_measurements
        verdicts = judge(slo, run.locked.measurements, variant.name)
        carried = True
        entry = carried_entry(run.locked, [v.lock_json() for v in verdicts])
        if run.locked.untrusted:  # kept as committed, counted as nothing
            verdicts = not_trusted(slo, variant.name, run.locked.untrusted)
        synced = recorded_matches(run.chain, run.locked)
        why = next((s.reason for s in run.results if s.action in ("failed", "skipped")), "")
        result.carried_over.append(
            f"{variant.name}: the committed build and verdicts (this run did not complete: {why})"
        )
    for verdict in verdicts:
        verdict.carried_over = carried
    result.slo.extend(verdicts)
    result.measured(variant.name, variant.inputs, measurements, spec.field("compile")["batch"])
    result.carried_over.extend(run.carried)
    return entry, synced


def dry_apply(ws: Workspace, spec: LoadedSpec, policy: RetryPolicy | None = None) -> SpecResult | None:
    """Apply's result for a spec with nothing to do, found by a walk that writes nothing; else None."""
    fetch, ws.remote_fetch = ws.remote_fetch, False  # a dry walk downloads nothing
    try:
        return _reconcile(ws, spec, Reporter(), policy or RetryPolicy.from_env(), dry=True)
    except WouldWrite:
        return None
    finally:
        ws.remote_fetch = fetch


def apply_spec(
    ws: Workspace,
    spec: LoadedSpec,
    reporter: Reporter,
    policy: RetryPolicy,
    remeasure: bool = False,
) -> SpecResult:
    """Check, then lock, then re-check: a dry walk without the spec's lock first, so a spec with
    nothing to do costs no lock file, no owner file and no write; anything else is redone under it."""
    if not remeasure:
        result = dry_apply(ws, spec, policy)
        if result is not None:
            _replay(reporter, result, 8 * len(variants(spec)))
            return result
    with locks.hold(ws.layout.locks, f"spec-{spec.name}", lambda h: reporter.waiting(spec.name, h)):
        return _reconcile(ws, spec, reporter, policy, remeasure)


def _replay(reporter: Reporter, result: SpecResult, total_stages: int) -> None:
    reporter.spec_started(result.name, total_stages)
    for stage in result.stages:
        reporter.stage_started(result.name, stage.variant, stage.name)
        reporter.stage_finished(result.name, stage)
    reporter.spec_finished(result)


def _reconcile(
    ws: Workspace,
    spec: LoadedSpec,
    reporter: Reporter,
    policy: RetryPolicy,
    remeasure: bool = False,
    dry: bool = False,
) -> SpecResult:
    result = SpecResult(spec.name, str(spec.path), spec.target)
    reporter.spec_started(spec.name, 8 * len(variants(spec)))
    lock_path = Layout.lock_file(spec.path)
    try:
        previous, problems = ws.committed_lock(lock_path, fresh=not dry)
    except LockUnreadable as exc:  # never rebuilt over: the committed evidence stays for its owner
        reporter.spec_finished(result.stall(str(exc)))
        return result
    result.lock_problems = list(problems)
    if result.lock_problems:
        previous = None  # never carried over nor trusted: rebuilt and rewritten from real records
    locked = previous.variants if previous is not None else {}  # vetted: reconciler.trust
    per_variant: dict[str, dict[str, Any]] = {}
    stalled = failed = False
    all_synced = True
    all_fresh = True
    sources: dict[str, Any] = {}
    for variant in variants(spec):
        try:
            chain = build_chain(spec, variant, ws.layout.root, ws.hasher)
        except SpecErrors as exc:
            result.errors.extend(str(e) for e in exc.errors)
            result.status, result.sync, result.health = health.STALLED, health.UNKNOWN, health.UNKNOWN
            reporter.spec_finished(result)
            return result
        sources = sources or lock_sources(spec, chain)
        prior = locked.get(variant.name) or LockedVariant(variant.name)
        run = ChainRun(ws, spec, variant, reporter, policy, prior, remeasure, dry)
        run.run(chain)
        result.stages.extend(run.results)
        per_variant[variant.name], synced = _judged(ws, spec, run, result)
        all_synced &= synced
        all_fresh &= run.complete or not prior.raw
        stalled |= run.stalled
        failed |= any(s.action == "failed" for s in run.results)
    if not all_fresh and previous is not None:
        sources = previous.raw.get("sources") or sources
    model_stages = per_variant.get("default", {}).get("stages", {})
    model = {
        "version": spec.field("model.version"),
        "import_key": model_stages.get("import", {}).get("key"),
    }
    if not all_fresh and previous is not None and isinstance(previous.raw.get("model"), dict):
        model = previous.raw["model"]
    data = lock_data(
        spec.name, spec.path.name, spec.target, model, spec.field("slo"), sources, per_variant, all_synced
    )
    result.sync = health.SYNCED if all_synced and not failed and not stalled else health.OUT_OF_SYNC
    result.health = health.of_verdicts(result.slo)
    result.status = health.status(result.sync, result.health, stalled=stalled, failed=failed)
    # the lock-free walk compares with the lock as read at its start (re-read when its stat changed);
    # a spec with work is walked again under its lock, with the file read afresh
    committed = previous.raw if previous is not None else None
    if dry and (ws.hasher.pending or not lockfile.holds(committed, data)):
        raise WouldWrite
    if not dry and not lockfile.holds(committed, data):
        checked(data)
    if not dry and lockfile.write(lock_path, data):
        _log_verdicts(ws, spec, result, previous)
    ws.hasher.flush()
    reporter.spec_finished(result)
    return result


def _through(
    ws: Workspace, specs: list[LoadedSpec], reporter: Reporter, remeasure: bool, executor: Executor
) -> list[SpecResult]:
    remote = ws.remote.config if ws.remote is not None else None
    jobs = jobs_for(ws.layout.root, [s.path for s in specs], remote, remeasure)
    results, warned = [], set()
    for outcome in executor.run(jobs, schedule.placements(ws, specs)):
        result = outcome.result
        for message in outcome.warnings:
            if message not in warned:
                warned.add(message)
                reporter.warning(message)
        reporter.spec_started(result.name, len(result.stages))
        for stage in result.stages:
            reporter.stage_finished(result.name, stage)
        reporter.spec_finished(result)
        results.append(result)
    return results


def _log_verdicts(ws: Workspace, spec: LoadedSpec, result: SpecResult, previous: LockView | None) -> None:
    """The ledger keeps every distinct set of verdicts, with the keys they were judged on (for audit)."""
    data = {
        "verdicts": [v.to_json() for v in result.slo],
        "keys": {f"{s.variant}/{s.name}": s.key for s in result.stages if s.key},
        "status": result.status,
        "sync": result.sync,
        "health": result.health,
        "had_lock": previous is not None,
    }
    ws.db.log_attempt(spec.name, "*", "verify", "", "judged", result.status, data=data)


def apply_all(
    ws: Workspace,
    specs: list[LoadedSpec],
    reporter: Reporter,
    policy: RetryPolicy | None = None,
    remeasure: bool = False,
    executor: Executor | None = None,
) -> list[SpecResult]:
    """Every spec; an internal error in one is that spec's error and writes nothing to its lock.
    With an executor, the specs run there (reconciler.engine.executors), else one after another here.
    `settle` then leaves the state settled for the next plan."""
    if executor is not None and specs and (executor.name != "local" or len(specs) > 1):
        return _through(ws, specs, reporter, remeasure, executor)  # one spec gains nothing from a pool
    policy = policy or RetryPolicy.from_env()
    settled = None if remeasure else Settled(ws, specs)
    indexed = False
    results = []
    for spec in specs:
        hit = settled.get(spec, "apply") if settled is not None else None
        if hit is not None:
            _replay(reporter, hit, 8 * len(variants(spec)))
            results.append(hit)
            continue
        if not indexed:
            index_locks(ws, [s.path for s in specs])
            indexed = True
        try:
            results.append(apply_spec(ws, spec, reporter, policy, remeasure))
        except Exception as exc:
            results.append(_failed(ws, spec, exc))
    return results


def _failed(ws: Workspace, spec: LoadedSpec, exc: Exception) -> SpecResult:
    if os.environ.get("NPUCTL_DEBUG"):
        traceback.print_exc()
    failed = SpecResult(spec.name, str(spec.path), spec.target, status=health.FAILED)
    if isinstance(exc, (locks.LockTimeout, PolicyError)):
        failed.errors.append(f"{spec.path}: {exc}")
    elif faults.is_infrastructure(exc):
        near = (ws.layout.tmp, ws.layout.store, ws.layout.state_dir, spec.path)
        failed.errors.append(f"{spec.path}: {faults.describe(exc, ws.layout.database, near)}")
    else:
        failed.errors.append(f"{spec.path}: internal error: {type(exc).__name__}: {exc}")
    return failed


def lock_stats(specs: list[LoadedSpec]) -> list[statcache.Recorded | None]:
    """The stat of every spec's lock file: taken before an apply, for `settle`."""
    return [statcache.stat_of(Layout.lock_file(s.path)) for s in specs]


def settle(
    ws: Workspace,
    specs: list[LoadedSpec],
    results: list[SpecResult],
    locks_before: list[statcache.Recorded | None],
) -> tuple[list[SpecResult], Settled] | None:
    """After an apply that built or wrote something (a result not settled, a lock file rewritten since
    `locks_before`): plans the specs as plan would (reconciler.engine.plan), from a fresh lock index,
    so each one it changed is remembered settled and the next plan does not plan it again: the cost of
    planning what this apply changed, paid here (a spec found settled costs a lookup). A no-op apply
    writes nothing. The plan results and the run's settled cache, or None when nothing was planned."""
    from reconciler.engine.plan import plan_settled
    from reconciler.engine.settled import is_settled

    if ws.remote is not None or ws.repair or not statcache.enabled():
        return None
    if all(is_settled(r) for r in results) and lock_stats(specs) == locks_before:
        return None
    ws.locks = LockIndex()
    return plan_settled(ws, specs)
