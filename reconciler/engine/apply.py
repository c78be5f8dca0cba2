"""apply: walk each chain, reuse what is recorded, build what is not, judge SLOs, write the lock file.

Recorded means in the local store or in the committed lock file under the same key; a stage recorded
only in the lock is rebuilt only when a later stage needs its bytes. One spec failing never stops the
others, and within a spec only the dependants of a failed stage are skipped. A terminal failure is
remembered by key: it is not retried until the stage's inputs change (the spec is Stalled). What
cannot run here keeps the committed evidence (reconciler.engine.lockwrite).
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

from backends.catalog import Target, targets
from backends.errors import BackendError, TerminalError, ToolchainMissing, summary
from reconciler.engine import faults, health, keys, schedule
from reconciler.engine.chain import StageSetup, Variant, build_chain, variants
from reconciler.engine.execute import InputsChanged, RetryPolicy, append_log, run_with_retries
from reconciler.engine.executors import Executor, jobs_for
from reconciler.engine.lockwrite import (
    carried_entry,
    lock_data,
    recorded_matches,
    variant_entry,
    with_other_runners,
)
from reconciler.engine.measurements import collect
from reconciler.engine.reporter import Reporter
from reconciler.engine.resolve import Resolved, first_to_build, index_locks, resolve
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.settled import Settled
from reconciler.engine.sources import lock_sources
from reconciler.engine.verify import judge
from reconciler.engine.walk import Artifacts, link_upstream, previous, reason
from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors
from reconciler.state import lockfile, lockread, locks
from reconciler.state.db import Failure, Record
from reconciler.state.lockread import LOCK_NOTE, LockedVariant, is_lock_record

FETCHED = "fetched from the remote cache (verified)"


class WouldWrite(Exception):
    """Raised by a dry walk at the first write it would make: the spec has work to do."""


class _ChainRun:
    """The state of one variant's walk; short-lived, one per apply of a variant.

    A `dry` walk reuses what is recorded and raises WouldWrite instead of building, logging or moving
    a head: apply takes the spec's lock only after a dry walk found something to do.
    """

    def __init__(
        self,
        ws: Workspace,
        spec: LoadedSpec,
        variant: Variant,
        reporter: Reporter,
        policy: RetryPolicy,
        locked: LockedVariant,
        remeasure: bool = False,
        dry: bool = False,
    ) -> None:
        self.dry = dry
        self.ws = ws
        self.spec = spec
        self.variant = variant
        self.reporter = reporter
        self.policy = policy
        self.locked = locked
        self.remeasure = remeasure
        self.target: Target = targets()[spec.target]
        self.chain: list[StageSetup] = []
        self.outputs: dict[str, Artifacts | None] = {}
        self.records: dict[str, Record] = {}
        self.results: list[StageResult] = []
        self.carried: list[str] = []
        self.blocked_by: str | None = None
        self.stalled = False
        self.not_run = False

    @property
    def complete(self) -> bool:
        return self.blocked_by is None

    def run(self, chain: list[StageSetup]) -> None:
        self.chain = chain
        for index, setup in enumerate(chain):
            name = setup.stage.name
            self.reporter.stage_started(self.spec.name, self.variant.name, name)
            result = self._stage(index, setup)
            self.results.append(result)
            self.reporter.stage_finished(self.spec.name, result)

    def _result(self, setup: StageSetup, action: str, key: str | None, why: str, **extra: Any) -> StageResult:
        return StageResult(setup.stage.name, self.variant.name, action, key, why, **extra)

    def _writing(self) -> None:
        if self.dry:
            raise WouldWrite

    def _wanted_again(self, setup: StageSetup) -> bool:
        return self.remeasure and setup.stage.name == "evaluate"

    def _bytes_needed(self, index: int) -> bool:
        """Whether a later stage must build (and so needs this stage's artifacts in the store).

        The seam for the remote cache: when it says True for a stage recorded in the
        lock, fetching the recorded digests (verified) replaces the rebuild that follows.
        """
        also = frozenset({"evaluate"}) if self.remeasure else frozenset()
        rest = self.chain[index + 1 :]
        return first_to_build(self.ws, rest, self.target, self.locked, self.outputs, also) is not None

    def _stage(self, index: int, setup: StageSetup) -> StageResult:
        name = setup.stage.name
        if self.blocked_by is not None:
            self.outputs[name] = None
            return self._result(setup, "skipped", None, f"not run: {self.blocked_by} did not complete")
        resolved = resolve(self.ws, setup, self.target, self.outputs, self.locked)
        assert resolved.key is not None and resolved.key_inputs is not None, "every upstream stage completed"
        key, key_inputs = resolved.key, resolved.key_inputs
        if self.dry and (resolved.source == "remote" or (resolved.source == "lock" and self.ws.remote)):
            raise WouldWrite  # the real walk would look the key up in the remote cache and fetch it
        if resolved.source == "identity":
            return self._identity(setup, resolved)
        if resolved.source in ("store", "fetched") and not self._wanted_again(setup):
            assert resolved.record is not None
            if resolved.source == "fetched":
                self._log(name, key, "fetched", FETCHED)
                return self._done(setup, resolved.record, "cached", FETCHED)
            return self._done(setup, resolved.record, "cached", "up to date")
        if resolved.source in ("lock", "carried") and not self._wanted_again(setup):
            assert resolved.record is not None
            remote_bad = layer.broken(self.ws, key)
            if not self._bytes_needed(index) and not self.ws.repairing(key) and not remote_bad:
                why = LOCK_NOTE if resolved.source == "lock" else resolved.note
                if resolved.source == "carried":
                    self.carried.append(f"{self.variant.name}/{name}: {why}")
                return self._done(setup, resolved.record, "cached", why)
        self.outputs[name] = None
        locked_record = self.locked.record(name)
        why = reason(previous(self.ws.db, self.spec.name, self.variant.name, name, locked_record), key_inputs)
        if self._wanted_again(setup) and resolved.found:
            why = "re-measuring on this machine (--remeasure)"
        if layer.broken(self.ws, key):
            why = "the remote cache's copy did not verify: rebuilt here (and pushed)"
        if corrupt := self.ws.corrupt_in(self.ws.db.record(key)):
            why = f"stored output {corrupt[0][:12]} was corrupt (quarantined in .npuctl/corrupt): rebuilt"
        if isinstance(setup.error, ToolchainMissing):
            return self._not_run(setup, key, f"not built: toolchain not installed: {setup.error}")
        if setup.error is not None:
            return self._failed(setup, key, str(setup.error), terminal=True)
        failure = self.ws.db.failure(key)
        if failure is not None:
            self.stalled = True
            self.blocked_by = name
            return self._result(
                setup,
                "failed",
                key,
                f"stalled: {failure.message} (not retried until its inputs change)",
                log=failure.log,
            )
        linked = link_upstream(setup, self.outputs)
        assert linked is not None
        missing = [n for n, meta in linked.items() if not self.ws.intact(meta["digest"])]
        if missing:
            return self._failed(
                setup, key, f"inputs recorded in the lock but not in the store: {', '.join(missing)}", False
            )
        return self._build(setup, linked, key, key_inputs, why)

    def _identity(self, setup: StageSetup, resolved: Resolved) -> StageResult:
        assert resolved.key is not None and resolved.key_inputs is not None
        artifacts = self.outputs[setup.stage.name] or {}
        record = resolved.record
        action = "cached"
        if record is None or is_lock_record(record):
            head_key = self.ws.db.head(self.spec.name, self.variant.name, setup.stage.name)
            digest = keys.output_digest({k: v["digest"] for k, v in artifacts.items()}, {})
            here = all(self.ws.intact(a["digest"]) for a in artifacts.values())
            # passing through artifacts known only from the lock: a record of the lock, not of this store
            note = setup.stage.idle_reason if here else f"{setup.stage.idle_reason}; {LOCK_NOTE}"
            record = Record(resolved.key, setup.stage.name, resolved.key_inputs, artifacts, {}, digest, note)
            if here:
                self._writing()
                self.ws.db.put_record(record)
            action = "built" if head_key != resolved.key and resolved.record is None else "cached"
        return self._done(setup, record, action, setup.stage.idle_reason, identity=True)

    def _done(self, setup: StageSetup, record: Record, action: str, why: str, **extra: Any) -> StageResult:
        name = setup.stage.name
        self.outputs[name] = record.artifacts
        self.records[name] = record
        if (
            not is_lock_record(record)
            and self.ws.db.head(self.spec.name, self.variant.name, name) != record.key
        ):
            self._writing()
            self.ws.db.set_head(self.spec.name, self.variant.name, name, record.key)
        return self._result(setup, action, record.key, why, **extra)

    def _build(
        self, setup: StageSetup, linked: dict[str, Any], key: str, key_inputs: dict[str, Any], why: str
    ) -> StageResult:
        self._writing()
        name = setup.stage.name
        log = self.ws.layout.logs / self.spec.name / self.variant.name / f"{name}-{key[:12]}.log"
        started = time.perf_counter()
        with locks.hold(self.ws.layout.locks, f"key-{key[:40]}", lambda h: self.reporter.waiting(name, h)):
            record = self.ws.db.record(key)
            if self.ws.usable(record) and not self._wanted_again(setup):
                assert record is not None
                return self._done(setup, record, "cached", "built by another npuctl process")
            try:
                record = run_with_retries(
                    self.ws, setup, self.target, linked, key, key_inputs, log, self.policy
                )
            except ToolchainMissing as exc:
                return self._not_run(setup, key, f"not built: toolchain not installed: {exc}")
            except TerminalError as exc:
                return self._failed(setup, key, str(exc), terminal=True, log=log)
            except (BackendError, InputsChanged) as exc:
                return self._failed(setup, key, str(exc), terminal=False, log=log)
        duration = (time.perf_counter() - started) * 1000
        self.ws.db.log_attempt(self.spec.name, self.variant.name, name, key, "built", why, str(log), duration)
        if layer.publish(self.ws, record):
            self._log(name, key, "pushed", "pushed to the remote cache")
        return self._done(
            setup, record, "built", why, duration_ms=round(duration, 1), note=record.note or None
        )

    def _log(self, stage: str, key: str, action: str, message: str) -> None:
        self._writing()
        self.ws.db.log_attempt(self.spec.name, self.variant.name, stage, key, action, message)

    def _not_run(self, setup: StageSetup, key: str, why: str) -> StageResult:
        self._writing()
        name = setup.stage.name
        self.not_run = True
        self.blocked_by = name
        self.outputs[name] = None
        self.ws.db.log_attempt(self.spec.name, self.variant.name, name, key, "skipped", why)
        return self._result(setup, "skipped", key, why)

    def _failed(
        self, setup: StageSetup, key: str, message: str, terminal: bool, log: Path | None = None
    ) -> StageResult:
        self._writing()
        name = setup.stage.name
        log_text = str(log) if log else ""
        if "\n" in message.strip():  # a toolchain's traceback or log tail: whole in the log, one line here
            if log is not None:
                append_log(log, f"\n{message}\n")
            message = summary(message)
        if terminal:
            self.stalled = True
            self.ws.db.put_failure(Failure(key, name, message, log_text))
        self.blocked_by = name
        self.outputs[name] = None
        self.ws.db.log_attempt(self.spec.name, self.variant.name, name, key, "failed", message, log_text)
        return self._result(setup, "failed", key, message, log=log_text or None)


def _judged(spec: LoadedSpec, run: _ChainRun, result: SpecResult) -> tuple[dict[str, Any], bool]:
    """The variant's lock entry, and whether it is of the spec as it is now (sync)."""
    variant = run.variant
    slo = spec.field("slo")
    if run.complete or not run.locked.raw:
        compile_failed = any(s.name == "compile" and s.action == "failed" for s in run.results)
        measurements = collect(run.records, compile_failed)
        verdicts = judge(slo, measurements, variant.name)
        carried = any(c.startswith(f"{variant.name}/evaluate:") for c in run.carried)
        entry = variant_entry(variant.inputs, run.records, [v.lock_json() for v in verdicts], measurements)
        if run.remeasure and any(s.name == "evaluate" and s.action == "built" for s in run.results):
            entry = with_other_runners(entry, run.locked)
        synced = run.complete
    else:
        measurements = run.locked.measurements
        verdicts = judge(slo, measurements, variant.name)
        carried = True
        entry = carried_entry(run.locked, [v.lock_json() for v in verdicts])
        synced = recorded_matches(run.chain, run.locked)
        why = next((s.reason for s in run.results if s.action in ("failed", "skipped")), "")
        result.carried_over.append(
            f"{variant.name}: the committed build and verdicts (this run did not complete: {why})"
        )
    for verdict in verdicts:
        verdict.carried_over = carried
    result.slo.extend(verdicts)
    result.measurements[variant.name] = measurements
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
    previous, problems = ws.committed_lock(lock_path, fresh=not dry)
    result.lock_problems = list(problems)
    if result.lock_problems:
        previous = None  # never carried over nor trusted: rebuilt and rewritten from real records
    locked = lockread.variants(previous)
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
        run = _ChainRun(ws, spec, variant, reporter, policy, prior, remeasure, dry)
        run.run(chain)
        result.stages.extend(run.results)
        per_variant[variant.name], synced = _judged(spec, run, result)
        all_synced &= synced
        all_fresh &= run.complete or not prior.raw
        stalled |= run.stalled
        failed |= any(s.action == "failed" for s in run.results)
    if not all_fresh and previous is not None:
        sources = previous.get("sources") or sources
    model_stages = per_variant.get("default", {}).get("stages", {})
    model = {
        "version": spec.field("model.version"),
        "import_key": model_stages.get("import", {}).get("key"),
    }
    if not all_fresh and previous is not None and isinstance(previous.get("model"), dict):
        model = previous["model"]
    data = lock_data(
        spec.name, spec.path.name, spec.target, model, spec.field("slo"), sources, per_variant, all_synced
    )
    result.sync = health.SYNCED if all_synced and not failed and not stalled else health.OUT_OF_SYNC
    result.health = health.of_verdicts(result.slo)
    result.status = health.status(result.sync, result.health, stalled=stalled, failed=failed)
    # the lock-free walk compares with the lock as read at its start (re-read when its stat changed);
    # a spec with work is walked again under its lock, with the file read afresh
    if dry and (ws.hasher.pending or not lockfile.holds(previous, data)):
        raise WouldWrite
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


def _log_verdicts(
    ws: Workspace, spec: LoadedSpec, result: SpecResult, previous: dict[str, Any] | None
) -> None:
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
    With an executor, the specs run there (reconciler.engine.executors), else one after another here."""
    if executor is not None and specs and (executor.name != "local" or len(specs) > 1):
        return _through(ws, specs, reporter, remeasure, executor)  # one spec gains nothing from a pool
    policy = policy or RetryPolicy.from_env()
    settled = None if remeasure else Settled(ws, specs)  # read only: a no-op apply writes nothing
    indexed = False
    results = []
    for spec in specs:
        hit = settled.get(spec, "apply") if settled is not None else None
        if hit is not None:
            _replay(reporter, hit, 8 * len(variants(spec)))
            results.append(hit)
            continue
        if not indexed:
            index_locks(ws, specs)
            indexed = True
        try:
            results.append(apply_spec(ws, spec, reporter, policy, remeasure))
        except Exception as exc:
            if os.environ.get("NPUCTL_DEBUG"):
                traceback.print_exc()
            failed = SpecResult(spec.name, str(spec.path), spec.target, status=health.FAILED)
            if isinstance(exc, locks.LockTimeout):
                failed.errors.append(f"{spec.path}: {exc}")
            elif faults.is_infrastructure(exc):
                near = (ws.layout.tmp, ws.layout.store, ws.layout.state_dir, spec.path)
                failed.errors.append(f"{spec.path}: {faults.describe(exc, ws.layout.database, near)}")
            else:
                failed.errors.append(f"{spec.path}: internal error: {type(exc).__name__}: {exc}")
            results.append(failed)
    return results
