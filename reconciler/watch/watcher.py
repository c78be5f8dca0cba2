"""The watch loop: debounced events -> affected specs -> cancel their stale builds -> plan -> apply.

Error classes follow Flux: an invalid spec (or a stage failure the engine records as terminal) is
Stalled and not retried until one of its inputs changes; a transient failure (a crashed or failed apply)
is retried with exponential backoff; a newer change cancels in-flight work and restarts it with the new
inputs. Planning happens in-process (fast, read-only); applying happens in a subprocess (cancellable).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine import health
from reconciler.engine.results import SpecResult
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecReport, check
from reconciler.spec._discover import discover_with_errors
from reconciler.state import lockfile, lockread
from reconciler.state.hashcache import FileHasher
from reconciler.watch.debounce import Batch, Debouncer
from reconciler.watch.inputs import InputIndex, Inputs, spec_inputs
from reconciler.watch.runner import Job, JobResult, Runner, SubprocessRunner
from reconciler.watch.status import Board


@dataclass(frozen=True)
class WatchOptions:
    debounce_s: float = 0.3
    """Quiet window: a batch of events is handled once no event arrived for this long."""
    max_wait_s: float | None = None
    """Upper bound on the delay under continuous writes (default max(10 x debounce, 2 s))."""
    jobs: int = 1
    """Applies running at once (each spec has at most one)."""
    retry_base_s: float = 2.0
    retry_cap_s: float = 60.0
    semantic: bool = True
    """Run validate's semantic checks (real ONNX graph) before applying: a bad save fails fast."""
    poll_s: float = 0.1
    initial: bool = True
    """Reconcile every spec at start (plan, and apply what is pending)."""

    def backoff(self, attempts: int) -> float:
        return float(min(self.retry_cap_s, self.retry_base_s * 2 ** max(attempts - 1, 0)))


@dataclass
class SpecState:
    file: Path
    name: str
    spec: LoadedSpec | None = None
    job: Job | None = None
    queued: bool = False
    queued_at: float = 0.0
    attempts: int = 0
    """Transient failures in a row (reset when an input changes)."""
    retry_at: float | None = None


def one_line(errors: Sequence[object]) -> str:
    first = str(errors[0]).splitlines()[0] if errors else "invalid"
    return first + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")


@dataclass
class Watcher:
    root: Path
    paths: Sequence[Path] = ()
    runner: Runner | None = None
    board: Board = field(default_factory=Board)
    options: WatchOptions = field(default_factory=WatchOptions)
    listener: Callable[[str, dict[str, Any]], None] | None = None
    """Called with (event, data) for: batch, plan, queued, started, cancelled, finished, retry."""

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        given = [(p if p.is_absolute() else Path.cwd() / p).resolve() for p in self.paths]
        self.paths = given or [Layout(self.root).default_specs()]
        self.runner = self.runner or SubprocessRunner(self.root)
        self.debouncer = Debouncer(self.options.debounce_s, self.options.max_wait_s)
        dirs = frozenset(p for p in self.paths if p.is_dir())
        self.index = InputIndex(spec_dirs=dirs, spec_files=frozenset(p for p in self.paths if p not in dirs))
        self.specs: dict[Path, SpecState] = {}
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    # ------------------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        """Watch until `stop` is set; running applies are cancelled on the way out."""
        from reconciler.engine.workspace import Workspace
        from reconciler.watch.observe import FolderWatcher

        self.ws = Workspace.open(self.root)
        folders = FolderWatcher(self.debouncer.add, self.ws.layout.state_dir)
        folders.start()
        try:
            folders.sync(self.index.folders())  # spec folders first: a save during start-up is not lost
            self._reconcile(self._discover(), None, act=self.options.initial)
            folders.sync(self.index.folders())
            self._emit("watching", folders=sorted(str(f) for f in self.index.folders()))
            while not stop.is_set():
                batch = self.debouncer.wait(stop, self.options.poll_s)
                if batch is not None:
                    self._on_batch(batch)
                    folders.sync(self.index.folders())
                self._poll_jobs()
                self._start_jobs()
                self.board.tick()
        finally:
            for state in self.specs.values():
                if state.job is not None:
                    state.job.cancel()
                    state.job = None
            folders.stop()
            self.ws.close()
            self.board.close()

    def _emit(self, event: str, **data: Any) -> None:
        self.events.append((time.monotonic(), event, data))
        if self.listener is not None:
            self.listener(event, data)

    def _discover(self) -> set[Path]:
        files, _ = discover_with_errors([p for p in self.paths if p.exists()], self.root)
        return set(files)

    def _on_batch(self, batch: Batch) -> None:
        affected = self.index.affected(set(batch.paths))
        self._emit(
            "batch", paths=sorted(str(p) for p in batch.paths), affected=sorted(str(p) for p in affected)
        )
        candidates = {p for p in affected if p not in self.specs and p not in self.index.spec_files}
        if candidates:  # new YAML files in a spec folder: only real specs (not bases, not foreign YAML)
            specs_now = set(discover_with_errors(list(self.index.spec_dirs), self.root)[0])
            affected -= {p for p in candidates if p.exists() and p not in specs_now}
        if affected:
            self._reconcile(affected, batch)

    # ------------------------------------------------------------------------------ planning
    def _reconcile(self, files: set[Path], batch: Batch | None, act: bool = True) -> None:
        """Load the specs in `files` (indexing what they read); with `act`, plan them and queue applies."""
        for file in sorted(files):
            state = self.specs.get(file)
            if state is not None and state.job is not None:
                state.job.cancel()
                state.job = None
                self.board.update(state.name, "cancelled", "inputs changed during the build: restarting")
                self.ws.db.log_attempt(
                    state.name, "*", "apply", "", "cancelled", "watch: an input changed during the build"
                )
                self.board.message(
                    f"{state.name}: build cancelled, an input changed", event="cancelled", spec=state.name
                )
                self._emit("cancelled", spec=state.name, file=str(file))
        self._emit("plan" if act else "load", files=sorted(str(f) for f in files), batch=batch)
        self.ws.hasher.flush()
        # its memo never expires: one per batch, not per watch
        self.ws.hasher = FileHasher(self.ws.db, self.root)
        existing = sorted(f for f in files if f.is_file())
        for file in sorted(set(files) - set(existing)):
            self._removed(file)
        for report in check(existing, self.root, semantic=self.options.semantic) if existing else []:
            self._loaded(report, act)

    def _removed(self, file: Path) -> None:
        state = self.specs.pop(file, None)
        self.index.drop(file)
        if state is not None:
            self.board.update(state.name, "removed", f"{file.name} was deleted")
            self.board.remove(state.name)

    def _loaded(self, report: SpecReport, act: bool) -> None:
        file = report.file.resolve()
        name = report.name or file.name.split(".")[0]
        state = self.specs.get(file)
        if state is None:
            state = self.specs[file] = SpecState(file, name)
        elif state.name != name:
            self.board.remove(state.name)
            state.name = name
        state.attempts, state.retry_at, state.queued = 0, None, False
        if report.spec is not None:
            self.index.put(file, spec_inputs(report.spec, self.root))
        else:
            previous = self.index.by_spec.get(file)
            keep = previous or Inputs(frozenset(), frozenset())
            self.index.put(file, Inputs(keep.files | {file}, keep.trees))
        if not report.valid:
            state.spec = None
            self._terminal(state, "invalid", [str(e) for e in report.errors])
            return
        state.spec = report.spec
        if act:
            self._plan(state)
        else:
            self.board.update(state.name, "watching", "not planned yet (--no-initial): waiting for a change")

    def _terminal(self, state: SpecState, kind: str, errors: list[str]) -> None:
        """Stalled until an input changes: show the first error on the status line, all of them above."""
        self.board.update(state.name, kind, one_line(errors))
        for error in errors:
            self.board.message(f"{state.name}: {error}", event="error", spec=state.name)

    def _plan(self, state: SpecState) -> None:
        from reconciler.engine.plan import plan_spec

        assert state.spec is not None
        try:
            result = plan_spec(self.ws, state.spec)
            self.ws.hasher.flush()
        except Exception as exc:  # a bug or an unreadable file must not stop the watcher
            self._transient(state, f"plan failed: {type(exc).__name__}: {exc}")
            return
        if result.errors:
            self._terminal(state, "invalid", result.errors)
            return
        stalled = [s for s in result.stages if s.action == "stalled"]
        if stalled:
            self._terminal(state, "stalled", [f"{s.name} [{s.variant}]: {s.reason}" for s in stalled])
            return
        pending = [s for s in result.stages if s.action != "cached"]
        if not pending:
            self.board.update(state.name, *self._verdict_line(state, None))
            return
        state.queued, state.queued_at = True, time.monotonic()
        first = pending[0]
        self.board.update(state.name, "queued", f"{first.name}: {first.reason}")
        self._emit("queued", spec=state.name, stages=[s.name for s in pending])

    # ------------------------------------------------------------------------------ applying
    def _start_jobs(self) -> None:
        assert self.runner is not None
        running = sum(1 for s in self.specs.values() if s.job is not None)
        now = time.monotonic()
        for state in sorted(self.specs.values(), key=lambda s: s.queued_at):
            if running >= self.options.jobs:
                return
            due = state.queued or (state.retry_at is not None and now >= state.retry_at)
            if state.job is not None or state.spec is None or not due:
                continue
            state.queued, state.retry_at = False, None
            state.job = self.runner.start(state.file)
            running += 1
            attempt = f" (attempt {state.attempts + 1})" if state.attempts else ""
            self.board.update(state.name, "building", f"apply{attempt}")
            self._emit("started", spec=state.name, file=str(state.file))

    def _poll_jobs(self) -> None:
        for state in self.specs.values():
            if state.job is None:
                continue
            result = state.job.poll()
            if result is not None:
                state.job = None
                self._finished(state, result)

    def _finished(self, state: SpecState, result: JobResult) -> None:
        entry = result.spec(state.file)
        status = entry.status if entry else None
        self._emit("finished", spec=state.name, returncode=result.returncode, status=status)
        if entry is None:
            self._transient(state, f"apply exited {result.returncode}: {result.last_error_line()}")
            return
        failed = [s for s in entry.stages if s.action in ("failed", "skipped")]
        reasons = [f"{s.name} [{s.variant}]: {s.reason}" for s in failed if s.action == "failed"]
        if entry.errors:
            self._terminal(state, "invalid", list(entry.errors))
        elif status == health.STALLED:
            skipped = [f"{s.name} [{s.variant}]: {s.reason}" for s in failed]
            self._terminal(state, "stalled", reasons or skipped or ["stalled"])
        elif status == health.FAILED:
            self._transient(state, reasons[0] if reasons else "a stage failed")
        else:
            state.attempts = 0
            built = sum(1 for s in entry.stages if s.action == "built")
            self.board.update(state.name, *self._verdict_line(state, entry, built))

    def _transient(self, state: SpecState, reason: str) -> None:
        state.attempts += 1
        delay = self.options.backoff(state.attempts)
        state.retry_at = time.monotonic() + delay
        self.board.update(state.name, "failed", f"{reason}; retry {state.attempts} in {delay:.0f}s")
        self._emit("retry", spec=state.name, attempts=state.attempts, delay=delay, reason=reason)

    def _verdict_line(self, state: SpecState, entry: SpecResult | None, built: int = 0) -> tuple[str, str]:
        """The health word of every other command (Healthy / Degraded / Unknown), with the SLO count,
        from apply's output or the lock file."""
        if entry is not None:
            verdicts = entry.slo
        else:
            try:
                lock = lockread.read(Layout.lock_file(state.file))
            except lockfile.LockUnreadable:
                lock = None  # apply's own result names it
            verdicts = lock.verdicts if lock is not None else []
        passed = sum(1 for v in verdicts if v.passed is True)
        failing = [v for v in verdicts if v.passed is False]
        what = (
            f"built {built} stages, " if built else ("up to date, " if entry is None else "nothing rebuilt, ")
        )
        detail = f"{what}{passed}/{len(verdicts)} SLOs met"
        if failing:
            from reconciler.output import measured_against

            names = ", ".join(
                f"{v.name} " + measured_against(v.name, v.value, v.comparison, v.threshold)
                for v in failing[:2]
            )
            return health.DEGRADED, f"{detail}; failed: {names}"
        return health.of_verdicts(verdicts), detail
