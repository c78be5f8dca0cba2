"""One variant's walk of its chain: each stage skipped, passed through, reused or built, in order.

A stage's result is reused when a record settles it, by a handler for where that record comes from
(`reconciler.engine.resolve.Source`): the local store, the remote cache, the committed lock file, or
evidence carried over from the lock; anything else is built here, unless a missing toolchain, a
failed setup or a remembered terminal failure says it cannot be. A stage below one that did not
complete is skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.catalog import Target, targets
from backends.sdk.errors import BackendError, TerminalError, ToolchainMissing, summary
from reconciler.engine import keys
from reconciler.engine.chain import StageSetup, Variant
from reconciler.engine.execute import InputsChanged, RetryPolicy, append_log, run_with_retries
from reconciler.engine.reporter import Reporter
from reconciler.engine.resolve import Resolved, Source, first_to_build, resolve
from reconciler.engine.results import StageResult
from reconciler.engine.stages import used_by
from reconciler.engine.walk import Artifacts, link_upstream, previous, reason
from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.spec import LoadedSpec
from reconciler.state import locks
from reconciler.state.db import Failure, Record
from reconciler.state.lockread import LOCK_NOTE, LockedVariant, is_lock_record

FETCHED = "fetched from the remote cache (verified)"


@dataclass(frozen=True)
class Reused:
    """A stage settled by a record without building: the record, where it came from, and why it stands."""

    record: Record
    source: Source
    why: str


class WouldWrite(Exception):
    """Raised by a dry walk at the first write it would make: the spec has work to do."""


class ChainRun:
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
        """Whether a later stage must build (and so needs this stage's artifacts in the store): a stage
        recorded only in the lock file stays so until then."""
        also = frozenset({"evaluate"}) if self.remeasure else frozenset()
        rest = self.chain[index + 1 :]
        return first_to_build(self.ws, rest, self.target, self.locked, self.outputs, also) is not None

    def _stage(self, index: int, setup: StageSetup) -> StageResult:
        """One stage: skipped below a stage that did not complete, passed through when inactive,
        reused when a record settles it (by where that record comes from), else rebuilt here."""
        if self.blocked_by is not None:
            self.outputs[setup.stage.name] = None
            return self._result(setup, "skipped", None, f"not run: {self.blocked_by} did not complete")
        resolved = resolve(self.ws, setup, self.target, self.outputs, self.locked)
        assert resolved.key is not None and resolved.key_inputs is not None, "every upstream stage completed"
        if self.dry and self._would_fetch(resolved):
            raise WouldWrite  # the real walk would look the key up in the remote cache and fetch it
        if resolved.source is Source.IDENTITY:
            return self._identity(setup, resolved)
        reused = None if self._wanted_again(setup) else self._reuse(index, resolved)
        if reused is not None:
            return self._done(setup, reused.record, "cached", reused.why)
        return self._rebuild(setup, resolved.key, resolved.key_inputs, resolved.found)

    def _would_fetch(self, resolved: Resolved) -> bool:
        """Whether the real walk would go to the remote cache for this key (a dry walk fetches nothing)."""
        return resolved.source is Source.REMOTE or (
            resolved.source is Source.LOCK and self.ws.remote is not None
        )

    def _reuse(self, index: int, resolved: Resolved) -> Reused | None:
        """The record that settles the stage, by the handler for where it comes from; None: build it."""
        handler = {
            Source.STORE: self._from_store,
            Source.FETCHED: self._from_remote,
            Source.LOCK: self._from_lock,
            Source.CARRIED: self._carried_over,
        }.get(resolved.source)
        return handler(index, resolved) if handler is not None else None

    def _from_store(self, index: int, resolved: Resolved) -> Reused:
        assert resolved.record is not None
        return Reused(resolved.record, Source.STORE, "up to date")

    def _from_remote(self, index: int, resolved: Resolved) -> Reused:
        """Downloaded and verified by resolve: logged as fetched, then an ordinary local record."""
        assert resolved.record is not None and resolved.key is not None
        self._log(resolved.setup.stage.name, resolved.key, "fetched", FETCHED)
        return Reused(resolved.record, Source.FETCHED, FETCHED)

    def _from_lock(self, index: int, resolved: Resolved) -> Reused | None:
        assert resolved.record is not None and resolved.key is not None
        if not self._lock_stands(index, resolved.key):
            return None
        return Reused(resolved.record, Source.LOCK, LOCK_NOTE)

    def _carried_over(self, index: int, resolved: Resolved) -> Reused | None:
        """The lock's evidence, not re-verified here: reported among what the run carried over."""
        assert resolved.record is not None and resolved.key is not None
        if not self._lock_stands(index, resolved.key):
            return None
        self.carried.append(f"{self.variant.name}/{resolved.setup.stage.name}: {resolved.note}")
        return Reused(resolved.record, Source.CARRIED, resolved.note)

    def _lock_stands(self, index: int, key: str) -> bool:
        """A record known only from the lock stands while no later stage needs its bytes here, fsck
        is not repairing it, and the remote cache holds no copy of it that failed to verify."""
        return not self._bytes_needed(index) and not self.ws.repairing(key) and not layer.broken(self.ws, key)

    def _rebuild(self, setup: StageSetup, key: str, key_inputs: dict[str, Any], found: bool) -> StageResult:
        """A stage no record settles: built here, unless its setup, a remembered terminal failure or
        an upstream output missing from the store already says it cannot be."""
        self.outputs[setup.stage.name] = None
        why = self._rebuild_reason(setup, key, key_inputs, found)
        stopped = self._cannot_build(setup, key)
        if stopped is not None:
            return stopped
        linked = link_upstream(setup, self.outputs)
        assert linked is not None
        missing = [n for n, meta in linked.items() if not self.ws.intact(meta["digest"])]
        if missing:
            return self._failed(
                setup, key, f"inputs recorded in the lock but not in the store: {', '.join(missing)}", False
            )
        return self._build(setup, linked, key, key_inputs, why)

    def _rebuild_reason(self, setup: StageSetup, key: str, key_inputs: dict[str, Any], found: bool) -> str:
        """Why the stage builds, the most specific cause first: a stored output found corrupt, the
        remote cache's copy failing to verify, --remeasure, else what changed since the last build."""
        if corrupt := self.ws.corrupt_in(self.ws.db.record(key)):
            return f"stored output {corrupt[0][:12]} was corrupt (quarantined in .npuctl/corrupt): rebuilt"
        if layer.broken(self.ws, key):
            return "the remote cache's copy did not verify: rebuilt here (and pushed)"
        if self._wanted_again(setup) and found:
            return "re-measuring on this machine (--remeasure)"
        name = setup.stage.name
        last = previous(self.ws.db, self.spec.name, self.variant.name, name, self.locked.record(name))
        return reason(last, key_inputs)

    def _cannot_build(self, setup: StageSetup, key: str) -> StageResult | None:
        """The stage's result when it is known not to build: its toolchain is missing, its setup
        failed, or its key failed terminally before (stalled until its inputs change)."""
        if isinstance(setup.error, ToolchainMissing):
            return self._not_run(setup, key, f"not built: toolchain not installed: {setup.error}")
        if setup.error is not None:
            return self._failed(setup, key, str(setup.error), terminal=True)
        failure = self.ws.db.failure(key)
        if failure is None:
            return None
        self.stalled = True
        self.blocked_by = setup.stage.name
        why = f"stalled: {failure.message} (not retried until its inputs change)"
        return self._result(setup, "failed", key, why, log=failure.log)

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
                if used_by(name):
                    return self._not_run(setup, key, f"not built: toolchain not installed: {exc}")
                return self._cannot_run_here(setup, key, key_inputs, str(exc))
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

    def _cannot_run_here(
        self, setup: StageSetup, key: str, key_inputs: dict[str, Any], message: str
    ) -> StageResult:
        """A last stage whose backend reports its toolchain present but which cannot run on this machine
        (Core ML prediction outside macOS, a bundle whose vendor SDK is absent) is recorded under its key
        as run with nothing measured, so the spec settles (Synced, its SLOs unverified) instead of
        planning the same build forever. Its key holds the toolchain's fingerprint: installing the tool
        builds it again."""
        why = f"not built: toolchain not installed: {message}"
        report = {"not_run": message}
        record = Record(key, setup.stage.name, key_inputs, {}, report, keys.output_digest({}, report), why)
        self.ws.db.put_record(record)
        self.ws.db.log_attempt(self.spec.name, self.variant.name, setup.stage.name, key, "skipped", why)
        return self._done(setup, record, "skipped", why)

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
