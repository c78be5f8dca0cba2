"""Running one stage: materialize inputs, call the backend, store artifacts, record. Retries transients.

Order matters for crash safety: artifacts are durably in the store before the record naming them is
committed, so a kill -9 at any point leaves either no record or a complete one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.sdk import stage_child
from backends.sdk.base import StageImpl, StageOutput, StageRequest
from backends.sdk.child_call import ChildHung, ChildKilled, ChildLost, Unloadable
from backends.sdk.errors import BackendError, TerminalError, ToolchainMissing, TransientError
from reconciler.engine import faults, keys
from reconciler.engine.chain import StageSetup
from reconciler.engine.workspace import Workspace
from reconciler.state.db import Record
from reconciler.state.hashcache import FileHasher


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2
    base_s: float = 1.0
    cap_s: float = 30.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        return cls(
            retries=int(os.environ.get("NPUCTL_RETRIES", "2")),
            base_s=float(os.environ.get("NPUCTL_RETRY_BASE_S", "1.0")),
        )

    def delay(self, attempt: int) -> float:
        return float(min(self.cap_s, self.base_s * (2**attempt)))


class InputsChanged(BackendError):
    """An input file changed while the stage ran: its result is discarded, never cached."""


def _link(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        try:
            shutil.copyfile(source, dest)
        except OSError as exc:  # name where it could not be written, not the store object read
            raise OSError(exc.errno, exc.strerror or str(exc), str(dest)) from exc


def _materialize(ws: Workspace, linked: dict[str, dict[str, Any]], indir: Path) -> dict[str, Path]:
    """Upstream artifacts appear under their own file names, so tools that sniff extensions work."""
    out = {}
    for name, meta in sorted(linked.items()):
        if not ws.intact(meta["digest"]):  # verified when its record was used; memoized, so cheap
            raise TransientError(f"input {name} ({meta['digest'][:12]}) is missing or corrupt in the store")
        dest = indir / name / meta["file"]
        _link(ws.store.path(meta["digest"]), dest)
        out[name] = dest
    return out


def _json_report(report: dict[str, Any], stage: str) -> dict[str, Any]:
    try:
        normalized: dict[str, Any] = json.loads(json.dumps(report, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise TerminalError(f"{stage} produced a report that is not JSON: {exc}") from exc
    return normalized


def _store_artifacts(ws: Workspace, artifacts: dict[str, Path], outdir: Path, stage: str) -> dict[str, Any]:
    stored = {}
    for name, path in sorted(artifacts.items()):
        resolved = path.resolve()
        if not resolved.is_file() or outdir.resolve() not in resolved.parents:
            raise TerminalError(
                f"{stage} returned artifact {name!r} outside its work folder or missing: {path}"
            )
        size = resolved.stat().st_size
        stored[name] = {"digest": ws.store.put(resolved), "file": resolved.name, "size": size}
    return stored


def _inputs_unchanged(ws: Workspace, setup: StageSetup) -> bool:
    fresh = FileHasher(ws.db, ws.layout.root)
    return all(fresh.digest(path) == setup.file_digests[name] for name, path in setup.files.items())


STAGE_TIMEOUT_S = 3600.0
"""How long a stage may run in the child interpreter (ONNX Runtime's quantize and compile, the shared
passes) before it is killed and fails: the hour a vendor bundle's commands get. NPUCTL_STAGE_TIMEOUT_S
sets another."""


def stage_timeout_s() -> float:
    return float(os.environ.get("NPUCTL_STAGE_TIMEOUT_S", STAGE_TIMEOUT_S))


def _run_impl(ws: Workspace, impl: StageImpl, request: StageRequest) -> StageOutput:
    """The stage in the run's child interpreter, so a toolchain crash fails this stage only; an
    implementation the child cannot load by name runs here, and the log says so."""
    reason = stage_child.in_process_reason(impl)
    if reason is None:
        who = stage_child.toolchain_name(impl)
        try:
            data = ws.child.call(
                "backends.sdk.stage_child:run_stage",
                stage_child.request_json(impl, request),
                request.log,
                who,
                timeout_s=stage_timeout_s(),
            )
            return stage_child.output_from_json(data)
        except Unloadable as exc:
            reason = f"the child interpreter cannot load it ({exc})"
        except (ChildKilled, ChildLost, ChildHung) as exc:
            with request.log.open("a") as fh:
                fh.write(f"npuctl: {request.stage} ran in a child process: {exc}\n")
            raise type(exc)(f"{request.stage} failed: {exc}") from exc
    output = impl.run(request)
    with request.log.open("a") as fh:  # after the run: a stage empties its log when it starts
        fh.write(f"npuctl: {request.stage} ran in the npuctl process: {reason}\n")
    return output


def run_once(
    ws: Workspace,
    setup: StageSetup,
    target: Target,
    linked: dict[str, dict[str, Any]],
    key: str,
    key_inputs: dict[str, Any],
    log: Path,
) -> Record:
    impl = setup.implementation(target)
    stage = setup.stage.name
    workdir = ws.layout.tmp / f"{os.getpid()}-{key[:16]}"
    shutil.rmtree(workdir, ignore_errors=True)
    outdir = workdir / "out"
    outdir.mkdir(parents=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        inputs: dict[str, Path] = {**_materialize(ws, linked, workdir / "in"), **setup.files}
        cache_dir = ws.layout.state_dir / "cache" / stage
        cache_dir.mkdir(parents=True, exist_ok=True)
        inputs["cache_dir"] = cache_dir
        request = StageRequest(stage, target, dict(setup.config), inputs, outdir, log)
        output = _run_impl(ws, impl, request)
        if not _inputs_unchanged(ws, setup):
            raise InputsChanged(f"{stage}: an input file changed while it ran; result discarded")
        report = _json_report(output.report, stage)
        artifacts = _store_artifacts(ws, output.artifacts, outdir, stage)
        digest = keys.output_digest({k: v["digest"] for k, v in artifacts.items()}, report)
        record = Record(key, stage, key_inputs, artifacts, report, digest, output.note)
        ws.db.put_record(record)
        return record
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def append_log(log: Path, text: str) -> None:
    """The stage log, best effort: on a full disk the log is the first thing that cannot grow."""
    try:
        with log.open("a") as fh:
            fh.write(text)
    except OSError:
        pass


def run_with_retries(
    ws: Workspace,
    setup: StageSetup,
    target: Target,
    linked: dict[str, dict[str, Any]],
    key: str,
    key_inputs: dict[str, Any],
    log: Path,
    policy: RetryPolicy,
) -> Record:
    """Transient errors are retried with capped exponential backoff; anything else propagates.

    Exceptions that are not BackendErrors (a bug, a toolchain raising its own type) are translated
    to TransientError with the traceback in the log: a crash of the toolchain fails the stage, not
    the reconciler.
    """
    attempt = 0
    while True:
        try:
            return run_once(ws, setup, target, linked, key, key_inputs, log)
        except (TerminalError, ToolchainMissing, InputsChanged, faults.InfrastructureError):
            raise
        except BackendError as exc:
            error: BackendError = exc
        except Exception as exc:
            if faults.is_infrastructure(exc):
                near = (log, ws.layout.tmp, ws.layout.store)
                raise faults.InfrastructureError(
                    f"{setup.stage.name}: {faults.describe(exc, ws.layout.database, near)}"
                ) from exc
            append_log(log, traceback.format_exc())
            error = TransientError(f"{setup.stage.name} crashed: {type(exc).__name__}: {exc}")
        if (full := faults.full_disk(ws.layout.tmp)) is not None:  # a toolchain's own words for ENOSPC
            raise faults.InfrastructureError(f"{setup.stage.name}: {full}: no space left on device ({error})")
        if attempt >= policy.retries:
            raise error
        append_log(log, f"\nattempt {attempt + 1} failed: {error}; retrying\n")
        time.sleep(policy.delay(attempt))
        attempt += 1
