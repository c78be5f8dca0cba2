"""plan: what apply would do, per spec and stage, with the field-level reason. Runs nothing.

Reads the local store and the committed lock file alike, so a fresh CI checkout plans what the
developer's clone plans: a stage whose key the lock records is up to date ("recorded in the lock").
A stage below one that must rebuild has no key yet (its upstream digest is unknown until built, and
early cutoff may still make it cached): it is planned as `build` "after <stage>", Terraform's "known
after apply". With recorded measurements, verify predicts the verdicts under the spec's thresholds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.catalog import targets
from backends.sdk.errors import ToolchainMissing
from reconciler.engine import health, keys
from reconciler.engine.chain import StageSetup, Variant, build_chain, variants
from reconciler.engine.measurements import collect
from reconciler.engine.predict import predict
from reconciler.engine.resolve import Resolved, Source, index_locks, walk
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.stages import VERIFY
from reconciler.engine.verify import judge, not_trusted
from reconciler.engine.walk import changes, previous, reason
from reconciler.engine.workspace import Workspace
from reconciler.records.judged import Judged
from reconciler.records.measured import Measurements, measurements
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors
from reconciler.state import lockread
from reconciler.state.db import Record
from reconciler.state.lockfile import LockUnreadable
from reconciler.state.lockread import LockedVariant, LockView

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from reconciler.engine.settled import Settled


def _pending_reason(ws: Workspace, spec: str, locked: LockedVariant, setup: StageSetup, after: str) -> str:
    """Why a stage whose upstream is still unknown rebuilds: upstream, plus its own changed fields."""
    name = setup.stage.name
    before = previous(ws.db, spec, locked.name, name, locked.record(name))
    own: list[str] = []
    if before is not None:
        current = {"fields": setup.config, "files": setup.file_digests, "impl": setup.impl_info}
        own = changes({k: before.key_inputs.get(k) for k in current}, current)
    return "; ".join([f"after {after} rebuilds", *own[:3]])


def _stage_result(
    ws: Workspace, spec: LoadedSpec, locked: LockedVariant, resolved: Resolved, first_build: str | None
) -> StageResult:
    setup, key = resolved.setup, resolved.key
    name, variant = setup.stage.name, locked.name
    if resolved.source is Source.UNKNOWN:
        assert first_build is not None
        why = _pending_reason(ws, spec.name, locked, setup, first_build)
        return StageResult(name, variant, "build", None, why, identity=not setup.active)
    if resolved.source is Source.IDENTITY:
        action = "cached" if resolved.record is not None else "build"
        return StageResult(name, variant, action, key, setup.stage.idle_reason, identity=True)
    if resolved.source is Source.STORE:
        return StageResult(name, variant, "cached", key, "up to date")
    if resolved.source is Source.REMOTE:
        return StageResult(name, variant, "cached", key, "in the remote cache")
    if resolved.source is Source.LOCK:
        return StageResult(name, variant, "cached", key, lockread.LOCK_NOTE)
    if resolved.source is Source.CARRIED:
        return StageResult(name, variant, "cached", key, resolved.note)
    assert key is not None and resolved.key_inputs is not None
    failure = ws.db.failure(key)
    if failure is not None:
        why = f"stalled: {failure.message} (not retried until its inputs change)"
        return StageResult(name, variant, "stalled", key, why, log=failure.log or None)
    why = reason(previous(ws.db, spec.name, variant, name, locked.record(name)), resolved.key_inputs)
    if name in locked.distrusted:
        why = f"recorded in the lock, but {locked.distrusted[name]}; {why}"
    if isinstance(setup.error, ToolchainMissing):
        why += f" (will not be built here: toolchain not installed: {setup.error})"
    elif setup.error is not None:
        why += f" (will fail: {setup.error})"
    return StageResult(name, variant, "build", key, why)


def _plan_variant(
    ws: Workspace,
    spec: LoadedSpec,
    chain: list[StageSetup],
    locked: LockedVariant,
    result: SpecResult,
) -> tuple[dict[str, Record], bool]:
    """Plans the stages; returns the records known and whether evaluate's stands on carried evidence."""
    records: dict[str, Record] = {}
    first_build: str | None = None
    carried = False
    for resolved in walk(ws, chain, targets()[spec.target], locked):
        name = resolved.setup.stage.name
        if resolved.source is Source.MISSING:
            first_build = first_build or name
        stage = _stage_result(ws, spec, locked, resolved, first_build)
        result.stages.append(stage)
        if resolved.found and resolved.record is not None:
            records[name] = resolved.record
        if resolved.source is Source.CARRIED:
            result.carried_over.append(f"{locked.name}/{name}: {stage.reason}")
            carried |= name == "evaluate"
    return records, carried


def _plan_verify(
    spec: LoadedSpec,
    variant: Variant,
    records: dict[str, Record],
    measured: Measurements,
    lock: LockView | None,
) -> tuple[StageResult, list[Judged]]:
    locked = lockread.variant(lock, variant.name)
    if "evaluate" not in records:
        after = StageResult(VERIFY, variant.name, "build", None, "after evaluate")
        return after, (
            not_trusted(spec.field("slo"), variant.name, locked.untrusted) if locked.untrusted else []
        )
    verdicts = judge(spec.field("slo"), measured, variant.name)
    predict(verdicts, locked.verdicts)
    locked_keys = {n: s.key for n, s in locked.stages.items()}
    current_keys = {n: r.key for n, r in records.items()}
    if lock is None or locked_keys != current_keys:
        return StageResult(VERIFY, variant.name, "rejudge", None, "lock file out of date"), verdicts
    if lock.slo != spec.field("slo"):
        diffs = keys.diff(lock.slo, spec.field("slo"), "spec.slo")
        why = "; ".join(f"{path}: {old} -> {new}" for path, old, new in diffs) or "spec.slo changed"
        return StageResult(VERIFY, variant.name, "rejudge", None, why), verdicts
    return StageResult(VERIFY, variant.name, "cached", None, "verdicts recorded"), verdicts


def plan_spec(ws: Workspace, spec: LoadedSpec) -> SpecResult:
    result = SpecResult(spec.name, str(spec.path), spec.target)
    lock_path = Layout.lock_file(spec.path)
    try:
        lock, problems = ws.committed_lock(lock_path)
    except LockUnreadable as exc:
        return result.stall(str(exc))
    result.lock_problems = list(problems)
    if result.lock_problems:
        lock = None  # never read as passed: the plan proceeds as if nothing were committed
    measuring = False
    for variant in variants(spec):
        try:
            chain = build_chain(spec, variant, ws.layout.root, ws.hasher)
        except SpecErrors as exc:
            result.errors.extend(str(e) for e in exc.errors)
            result.status, result.sync, result.health = health.STALLED, health.UNKNOWN, health.UNKNOWN
            return result
        records, carried = _plan_variant(ws, spec, chain, lockread.variant(lock, variant.name), result)
        measured = collect(records)  # signed once: each measurement's digest is a JSON encoding
        verify, verdicts = _plan_verify(spec, variant, records, measurements(measured), lock)
        for verdict in verdicts:
            verdict.carried_over = carried
        result.stages.append(verify)
        result.slo.extend(verdicts)
        result.measured(variant.name, variant.inputs, measured, spec.field("compile")["batch"])
        measuring |= verify.action == "build"
    builds = any(s.action in ("build", "stalled") for s in result.stages)
    stalled = any(s.action == "stalled" for s in result.stages)
    result.sync = (
        health.UNKNOWN if result.lock_problems else (health.OUT_OF_SYNC if builds else health.SYNCED)
    )
    # to be measured: nothing proved yet, and nothing in flight (Progressing is status's, under a lock)
    result.health = health.UNKNOWN if measuring else health.of_verdicts(result.slo)
    result.status = health.status(result.sync, result.health, stalled=stalled)
    return result


def plan_all(ws: Workspace, specs: list[LoadedSpec]) -> list[SpecResult]:
    """Settled specs come from reconciler.engine.settled; the others are planned in full (and a
    settled one found so is remembered with the dry apply's result, for the next plan or apply)."""
    return plan_settled(ws, specs)[0]


def plan_settled(ws: Workspace, specs: list[LoadedSpec]) -> tuple[list[SpecResult], Settled]:
    """plan_all, with the run's settled-spec cache (which holds each settled spec's apply result)."""
    from reconciler.engine.settled import Settled

    settled = Settled(ws, specs)
    results: list[SpecResult | None] = [settled.get(spec, "plan") for spec in specs]
    _plan_rest(ws, settled, specs, results, [s.path for s in specs])
    return [r for r in results if r is not None], settled


def plan_read(
    ws: Workspace, read: list[LoadedSpec], every: list[Path], stats: dict[str, Any]
) -> tuple[list[SpecResult], Settled]:
    """The plans of the specs `read`, each in full, when the other spec files of `every` were not read
    (unchanged since a run recorded them: reconciler.cli._replay, which found `stats`); a lookup in
    another spec's lock file sees them all."""
    from reconciler.engine.settled import Settled

    settled = Settled(ws, read, every, stats)
    results: list[SpecResult | None] = [None] * len(read)
    _plan_rest(ws, settled, read, results, every)
    return [r for r in results if r is not None], settled


def _plan_rest(
    ws: Workspace,
    settled: Settled,
    specs: Sequence[LoadedSpec | None],
    results: list[SpecResult | None],
    spec_files: list[Path],
) -> None:
    """Plans in full each spec without a result (and remembers those found settled, with the dry
    apply's result, for the next plan or apply); then writes the settled cache."""
    from reconciler.engine.settled import is_settled

    if any(r is None for r in results):
        index_locks(ws, spec_files)
    for index, spec in enumerate(specs):
        if results[index] is not None or spec is None:
            continue
        with settled.tracking(ws):
            result = plan_spec(ws, spec)
            again = None
            if settled.usable and is_settled(result):
                from reconciler.engine.apply import dry_apply  # a plan of changed specs needs no apply

                again = dry_apply(ws, spec)
        settled.remember(spec, result, again)
        results[index] = result
    ws.hasher.flush()
    settled.save()
