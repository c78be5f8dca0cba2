"""plan: what apply would do, per spec and stage, with the field-level reason. Runs nothing.

A stage below one that must rebuild has no key yet (its upstream digest is unknown until built, and
early cutoff may still make it cached): it is planned as `build` "after <stage>", Terraform's "known
after apply".
"""

from __future__ import annotations

from typing import Any

from backends.catalog import targets
from backends.errors import ToolchainMissing
from reconciler.engine import keys
from reconciler.engine.chain import StageSetup, Variant, build_chain, variants
from reconciler.engine.measurements import collect
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.stages import VERIFY
from reconciler.engine.verify import judge
from reconciler.engine.walk import Artifacts, changes, identity_outputs, link_upstream, reason
from reconciler.engine.workspace import Workspace
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors
from reconciler.state import lockfile
from reconciler.state.db import Record


def _pending_reason(ws: Workspace, spec: str, variant: str, setup: StageSetup, after: str) -> str:
    """Why a stage whose upstream is still unknown rebuilds: upstream, plus its own changed fields."""
    head_key = ws.db.head(spec, variant, setup.stage.name)
    head = ws.db.record(head_key) if head_key else None
    own: list[str] = []
    if head is not None:
        current = {"fields": setup.config, "files": setup.file_digests, "impl": setup.impl_info}
        previous = {k: head.key_inputs.get(k) for k in current}
        own = changes(previous, current)
    return "; ".join([f"after {after} rebuilds", *own[:3]])


def _plan_variant(
    ws: Workspace, spec: LoadedSpec, variant: Variant, chain: list[StageSetup], result: SpecResult
) -> tuple[dict[str, Record], str | None]:
    """Plans the stages; returns the records known so far and the first stage that must build."""
    target = targets()[spec.target]
    outputs: dict[str, Artifacts | None] = {}
    records: dict[str, Record] = {}
    first_build: str | None = None
    for setup in chain:
        name = setup.stage.name
        linked = link_upstream(setup, outputs)
        if linked is None:
            assert first_build is not None
            outputs[name] = None
            why = _pending_reason(ws, spec.name, variant.name, setup, first_build)
            result.stages.append(
                StageResult(name, variant.name, "build", None, why, identity=not setup.active)
            )
            continue
        key_inputs = setup.key_inputs(target)
        key = keys.digest(key_inputs)
        record = ws.db.record(key)
        if not setup.active:
            outputs[name] = identity_outputs(setup, linked)
            action = "cached" if record is not None else "build"
            if record is not None:
                records[name] = record
            result.stages.append(
                StageResult(name, variant.name, action, key, setup.stage.idle_reason, identity=True)
            )
            continue
        if ws.usable(record):
            assert record is not None
            outputs[name] = record.artifacts
            records[name] = record
            result.stages.append(StageResult(name, variant.name, "cached", key, "up to date"))
            continue
        outputs[name] = None
        first_build = first_build or name
        failure = ws.db.failure(key)
        if failure is not None:
            why = f"stalled: {failure.message} (not retried until its inputs change)"
            result.stages.append(
                StageResult(name, variant.name, "stalled", key, why, log=failure.log or None)
            )
            continue
        head_key = ws.db.head(spec.name, variant.name, name)
        why = reason(ws.db.record(head_key) if head_key else None, key_inputs)
        if isinstance(setup.error, ToolchainMissing):
            why += f" (will not be built here: toolchain not installed: {setup.error})"
        elif setup.error is not None:
            why += f" (will fail: {setup.error})"
        result.stages.append(StageResult(name, variant.name, "build", key, why))
    return records, first_build


def _plan_verify(
    spec: LoadedSpec, variant: Variant, records: dict[str, Record], lock: dict[str, Any] | None
) -> tuple[StageResult, list[Any]]:
    if "evaluate" not in records:
        return StageResult(VERIFY, variant.name, "build", None, "after evaluate"), []
    measurements = collect(records)
    verdicts = judge(spec.field("slo"), measurements, variant.name)
    locked = ((lock or {}).get("variants") or {}).get(variant.name) or {}
    locked_keys = {n: s.get("key") for n, s in (locked.get("stages") or {}).items()}
    current_keys = {n: r.key for n, r in records.items()}
    if lock is None or locked_keys != current_keys:
        return StageResult(VERIFY, variant.name, "rejudge", None, "lock file out of date"), verdicts
    if lock.get("slo") != spec.field("slo"):
        diffs = keys.diff(lock.get("slo"), spec.field("slo"), "spec.slo")
        why = "; ".join(f"{path}: {old} -> {new}" for path, old, new in diffs) or "spec.slo changed"
        return StageResult(VERIFY, variant.name, "rejudge", None, why), verdicts
    return StageResult(VERIFY, variant.name, "cached", None, "verdicts recorded"), verdicts


def plan_spec(ws: Workspace, spec: LoadedSpec) -> SpecResult:
    result = SpecResult(spec.name, str(spec.path), spec.target)
    lock = lockfile.read(Layout.lock_file(spec.path))
    for variant in variants(spec):
        try:
            chain = build_chain(spec, variant, ws.layout.root, ws.hasher)
        except SpecErrors as exc:
            result.errors.extend(str(e) for e in exc.errors)
            result.status = "Stalled"
            return result
        records, _ = _plan_variant(ws, spec, variant, chain, result)
        verify, verdicts = _plan_verify(spec, variant, records, lock)
        result.stages.append(verify)
        result.slo.extend(verdicts)
        result.measurements[variant.name] = collect(records)
    actions = {s.action for s in result.stages}
    result.status = (
        "Stalled" if "stalled" in actions else ("Reconciling" if actions - {"cached"} else "Ready")
    )
    return result


def plan_all(ws: Workspace, specs: list[LoadedSpec]) -> list[SpecResult]:
    results = [plan_spec(ws, spec) for spec in specs]
    ws.hasher.flush()
    return results
