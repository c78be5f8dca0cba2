"""apply: walk each chain, reuse what is recorded, build what is not, judge SLOs, write the lock file.

One spec failing never stops the others, and within a spec only the dependants of a failed stage
are skipped. A terminal failure is remembered by key: it is not retried until the stage's inputs
change (the spec is Stalled).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from backends.catalog import Target, targets
from backends.errors import BackendError, TerminalError, ToolchainMissing
from reconciler.engine import keys
from reconciler.engine.chain import StageSetup, Variant, build_chain, variants
from reconciler.engine.execute import InputsChanged, RetryPolicy, run_with_retries
from reconciler.engine.measurements import collect
from reconciler.engine.reporter import Reporter
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.sources import lock_sources
from reconciler.engine.verify import judge
from reconciler.engine.walk import Artifacts, identity_outputs, link_upstream, reason
from reconciler.engine.workspace import Workspace
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors
from reconciler.state import lockfile, locks
from reconciler.state.db import Failure, Record


class _ChainRun:
    """The state of one variant's walk; short-lived, one per apply of a variant."""

    def __init__(
        self, ws: Workspace, spec: LoadedSpec, variant: Variant, reporter: Reporter, policy: RetryPolicy
    ) -> None:
        self.ws = ws
        self.spec = spec
        self.variant = variant
        self.reporter = reporter
        self.policy = policy
        self.target: Target = targets()[spec.target]
        self.outputs: dict[str, Artifacts | None] = {}
        self.records: dict[str, Record] = {}
        self.results: list[StageResult] = []
        self.blocked_by: str | None = None
        self.stalled = False
        self.not_run = False

    def run(self, chain: list[StageSetup]) -> None:
        for setup in chain:
            name = setup.stage.name
            self.reporter.stage_started(self.spec.name, self.variant.name, name)
            result = self._stage(setup)
            self.results.append(result)
            self.reporter.stage_finished(self.spec.name, result)

    def _result(self, setup: StageSetup, action: str, key: str | None, why: str, **extra: Any) -> StageResult:
        return StageResult(setup.stage.name, self.variant.name, action, key, why, **extra)

    def _stage(self, setup: StageSetup) -> StageResult:
        name = setup.stage.name
        if self.blocked_by is not None:
            self.outputs[name] = None
            return self._result(setup, "skipped", None, f"not run: {self.blocked_by} did not complete")
        linked = link_upstream(setup, self.outputs)
        assert linked is not None, "every upstream stage completed"
        key_inputs = setup.key_inputs(self.target)
        key = keys.digest(key_inputs)
        head_key = self.ws.db.head(self.spec.name, self.variant.name, name)
        if not setup.active:
            return self._identity(setup, linked, key, key_inputs, head_key)
        record = self.ws.db.record(key)
        if self.ws.usable(record):
            assert record is not None
            return self._done(setup, record, "cached", "up to date")
        why = reason(self.ws.db.record(head_key) if head_key else None, key_inputs)
        if corrupt := self.ws.corrupt_in(record):
            why = f"stored output {corrupt[0][:12]} was corrupt (quarantined in .npuctl/corrupt): rebuilt"
        if isinstance(setup.error, ToolchainMissing):
            return self._not_run(setup, key, f"not built: toolchain not installed: {setup.error}")
        if setup.error is not None:
            return self._failed(setup, key, str(setup.error), terminal=True)
        failure = self.ws.db.failure(key)
        if failure is not None:
            self.stalled = True
            self.blocked_by = name
            self.outputs[name] = None
            return self._result(
                setup,
                "failed",
                key,
                f"stalled: {failure.message} (not retried until its inputs change)",
                log=failure.log,
            )
        return self._build(setup, linked, key, key_inputs, why)

    def _identity(
        self,
        setup: StageSetup,
        linked: dict[str, Any],
        key: str,
        key_inputs: dict[str, Any],
        head_key: str | None,
    ) -> StageResult:
        artifacts = identity_outputs(setup, linked)
        record = self.ws.db.record(key)
        action = "cached"
        if record is None:
            digest = keys.output_digest({k: v["digest"] for k, v in artifacts.items()}, {})
            record = Record(key, setup.stage.name, key_inputs, artifacts, {}, digest, setup.stage.idle_reason)
            self.ws.db.put_record(record)
            action = "built" if head_key != key else "cached"
        return self._done(setup, record, action, setup.stage.idle_reason, identity=True)

    def _done(self, setup: StageSetup, record: Record, action: str, why: str, **extra: Any) -> StageResult:
        name = setup.stage.name
        self.outputs[name] = record.artifacts
        self.records[name] = record
        if self.ws.db.head(self.spec.name, self.variant.name, name) != record.key:
            self.ws.db.set_head(self.spec.name, self.variant.name, name, record.key)
        return self._result(setup, action, record.key, why, **extra)

    def _build(
        self, setup: StageSetup, linked: dict[str, Any], key: str, key_inputs: dict[str, Any], why: str
    ) -> StageResult:
        name = setup.stage.name
        log = self.ws.layout.logs / self.spec.name / self.variant.name / f"{name}-{key[:12]}.log"
        started = time.perf_counter()
        with locks.hold(self.ws.layout.locks, f"key-{key[:40]}", lambda h: self.reporter.waiting(name, h)):
            record = self.ws.db.record(key)
            if self.ws.usable(record):
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
        return self._done(
            setup, record, "built", why, duration_ms=round(duration, 1), note=record.note or None
        )

    def _not_run(self, setup: StageSetup, key: str, why: str) -> StageResult:
        name = setup.stage.name
        self.not_run = True
        self.blocked_by = name
        self.outputs[name] = None
        self.ws.db.log_attempt(self.spec.name, self.variant.name, name, key, "skipped", why)
        return self._result(setup, "skipped", key, why)

    def _failed(
        self, setup: StageSetup, key: str, message: str, terminal: bool, log: Path | None = None
    ) -> StageResult:
        name = setup.stage.name
        log_text = str(log) if log else ""
        if terminal:
            self.stalled = True
            self.ws.db.put_failure(Failure(key, name, message, log_text))
        self.blocked_by = name
        self.outputs[name] = None
        self.ws.db.log_attempt(self.spec.name, self.variant.name, name, key, "failed", message, log_text)
        return self._result(setup, "failed", key, message, log=log_text or None)


def _variant_lock(
    run: _ChainRun, verdicts: list[dict[str, Any]], measurements: dict[str, Any]
) -> dict[str, Any]:
    stages = {
        name: {
            "key": record.key,
            "artifacts": record.artifacts,
            "identity": record.note.startswith("identity"),
            "impl": record.key_inputs.get("impl", {}),
        }
        for name, record in run.records.items()
    }
    return {
        "inputs": run.variant.inputs,
        "stages": stages,
        "measurements": measurements,
        "verdicts": verdicts,
    }


def _lock_data(
    spec: LoadedSpec, result: SpecResult, per_variant: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    model = per_variant.get("default", {}).get("stages", {}).get("import", {})
    return {
        "format_version": lockfile.FORMAT_VERSION,
        "spec": spec.name,
        "file": spec.path.name,
        "target": spec.target,
        "model": {
            "version": spec.field("model.version"),
            "import_key": model.get("key"),
        },
        "slo": spec.field("slo"),
        "status": result.status,
        "errors": sorted({s.reason for s in result.stages if s.action == "failed"}),
        "variants": per_variant,
    }


def apply_spec(ws: Workspace, spec: LoadedSpec, reporter: Reporter, policy: RetryPolicy) -> SpecResult:
    result = SpecResult(spec.name, str(spec.path), spec.target)
    reporter.spec_started(spec.name, 8 * len(variants(spec)))
    with locks.hold(ws.layout.locks, f"spec-{spec.name}", lambda h: reporter.waiting(spec.name, h)):
        per_variant: dict[str, dict[str, Any]] = {}
        stalled = not_run = False
        sources: dict[str, Any] = {}
        for variant in variants(spec):
            try:
                chain = build_chain(spec, variant, ws.layout.root, ws.hasher)
            except SpecErrors as exc:
                result.errors.extend(str(e) for e in exc.errors)
                result.status = "Stalled"
                reporter.spec_finished(result)
                return result
            sources = sources or lock_sources(spec, chain)
            run = _ChainRun(ws, spec, variant, reporter, policy)
            run.run(chain)
            result.stages.extend(run.results)
            measurements = collect(run.records)
            verdicts = judge(spec.field("slo"), measurements, variant.name)
            result.slo.extend(verdicts)
            result.measurements[variant.name] = measurements
            per_variant[variant.name] = _variant_lock(run, [v.to_json() for v in verdicts], measurements)
            stalled |= run.stalled
            not_run |= run.not_run
        result.status = _status(result, stalled, not_run)
        lock_path = Layout.lock_file(spec.path)
        previous = lockfile.read(lock_path)
        data = {**_lock_data(spec, result, per_variant), "sources": sources}
        if lockfile.write(lock_path, data):
            _log_verdicts(ws, spec, result, previous)
        ws.hasher.flush()
    reporter.spec_finished(result)
    return result


def _status(result: SpecResult, stalled: bool, not_run: bool) -> str:
    if stalled or not_run:
        return "Stalled"
    if any(s.action == "failed" for s in result.stages):
        return "Failed"
    return "Ready"


def _log_verdicts(
    ws: Workspace, spec: LoadedSpec, result: SpecResult, previous: dict[str, Any] | None
) -> None:
    """The ledger keeps every distinct set of verdicts, with the keys they were judged on (for audit)."""
    data = {
        "verdicts": [v.to_json() for v in result.slo],
        "keys": {f"{s.variant}/{s.name}": s.key for s in result.stages if s.key},
        "status": result.status,
        "had_lock": previous is not None,
    }
    ws.db.log_attempt(spec.name, "*", "verify", "", "judged", result.status, data=data)


def apply_all(
    ws: Workspace, specs: list[LoadedSpec], reporter: Reporter, policy: RetryPolicy | None = None
) -> list[SpecResult]:
    policy = policy or RetryPolicy.from_env()
    results = []
    for spec in specs:
        try:
            results.append(apply_spec(ws, spec, reporter, policy))
        except Exception as exc:
            failed = SpecResult(spec.name, str(spec.path), spec.target, status="Failed")
            failed.errors.append(f"{spec.path}: internal error: {type(exc).__name__}: {exc}")
            results.append(failed)
    return results
