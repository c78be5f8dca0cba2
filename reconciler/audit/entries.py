"""One observed state of a spec's results: what was built from which model, and how each SLO fared."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.engine import health
from reconciler.records.judged import Judged
from reconciler.state.lockread import LockedStage, LockView
from reconciler.trust.signing import Trust, mapping

CANCELLED = "cancelled"
"""The state of an attempt stopped before it judged anything; the other states are verdict words."""
CANCELLED_STATUS = "Cancelled"
"""The status the ledger records for such an attempt."""
READY = "Ready"
"""Format-1 locks' word for a spec built with nothing failed."""


@dataclass
class AuditEntry:
    source: str
    """commit | working tree | ledger"""
    label: str
    """Short commit sha, "working tree", or "local apply"."""
    time: datetime
    """Commit time (committer), lock file modification time, or apply time; timezone-aware."""
    spec: str
    target: str
    lock_file: str
    """Repository-relative path of the lock file."""
    status: str
    """The lock's health (Healthy / Degraded / Unknown; Ready / Stalled / Failed in format-1 locks)."""
    model_version: str | None
    model_digest: str | None
    """The import stage's output model digest (the normalized model every later stage builds on)."""
    model_file_digest: str | None
    """sha256 of the ONNX file itself, when the lock records it (`sources.files.model`)."""
    import_key: str | None
    verdicts: list[Judged] = field(default_factory=list)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)
    """variant -> the measurements exactly as the lock records them."""
    toolchains: dict[str, dict[str, Any]] = field(default_factory=dict)
    """stage -> {"name", "version", "fingerprint"} of the implementation that built it."""
    commit: str | None = None
    author: str = ""
    subject: str = ""
    signed_by: dict[str, str] = field(default_factory=dict)
    """Variant -> the names of the keys that signed the records its verdicts rest on (reconciler.trust)."""
    applied_at: list[str] = field(default_factory=list)
    """Times of local applies (ledger) that produced exactly these results."""
    attempt: str | None = None
    """For an attempt that judged nothing (ledger): "failed: STAGE: why" or "cancelled: why"."""
    settings: dict[str, str] = field(default_factory=dict)
    """What else tells two builds of one model apart: quantization and toolchain (`dvc exp show`'s params)."""

    @property
    def state(self) -> str:
        """pass (every SLO met on a measurement) | fail (an SLO failed or the build failed) | unverified."""
        if self.status == CANCELLED_STATUS:
            return CANCELLED
        failed = self.status in (health.FAILED, health.STALLED, health.DEGRADED)
        if failed or any(v.passed is False for v in self.verdicts):
            return Verdict.FAIL.word
        if self.verdicts and all(v.passed is True for v in self.verdicts):
            return Verdict.PASS.word
        settled = self.status in (READY, health.HEALTHY)
        return Verdict.PASS.word if settled and not self.verdicts else Verdict.UNVERIFIED.word

    @property
    def model(self) -> str:
        """`version@digest12`, the human name of a model version."""
        digest = (self.model_file_digest or self.model_digest or "")[:12]
        return f"{self.model_version or '?'}@{digest or '?'}"

    def verdict_key(self) -> tuple[Any, ...]:
        """What makes two entries the same result (for matching ledger applies to commits)."""
        return (
            self.spec,
            self.import_key,
            tuple(sorted((v.variant, v.name, v.value, v.verdict) for v in self.verdicts)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "label": self.label,
            "commit": self.commit,
            "time": self.time.isoformat(),
            "author": self.author,
            "subject": self.subject,
            "spec": self.spec,
            "target": self.target,
            "lock_file": self.lock_file,
            "status": self.status,
            "state": self.state,
            "model": {
                "version": self.model_version,
                "digest": self.model_digest,
                "file_digest": self.model_file_digest,
                "import_key": self.import_key,
            },
            "verdicts": [v.to_json() for v in self.verdicts],
            "measurements": self.measurements,
            "toolchains": self.toolchains,
            "applied_at": self.applied_at,
            "settings": self.settings,
            "signed_by": self.signed_by,
            "attempt": self.attempt,
        }


def toolchains(stages: Mapping[str, LockedStage]) -> dict[str, dict[str, Any]]:
    """Implementation identity per non-identity stage of a lock variant (or of records)."""
    out: dict[str, dict[str, Any]] = {}
    for name, stage in stages.items():
        impl = stage.impl
        if stage.identity or impl.get("name") == "identity":
            continue
        out[name] = {
            "name": impl.get("name"),
            "version": impl.get("version"),
            "fingerprint": impl.get("fingerprint") or {},
        }
    return out


def settings(stages: Mapping[str, LockedStage], toolchain: dict[str, dict[str, Any]]) -> dict[str, str]:
    """`quantization`: mode, types and a short digest of every quantization field the lock recorded
    (lock format 2; "none" for an idle stage; "?" when unrecorded); `toolchain`: the tool versions."""
    from reconciler.engine import keys

    quantize = stages.get("quantize")
    fields = ((quantize.inputs if quantize else {}).get("fields") or {}).get("quantization")
    if isinstance(fields, dict) and fields.get("mode", "none") != "none":
        types = "/".join(str(fields.get(k)) for k in ("weights", "activations") if fields.get(k))
        quantization = f"{fields['mode']}{' ' + types if types else ''} #{keys.digest(fields)[:6]}"
    elif (quantize is not None and quantize.identity) or isinstance(fields, dict):
        quantization = "none"
    else:
        quantization = "?" if quantize is None else "set (not recorded)"
    versions: dict[str, str] = {}
    for stage in toolchain.values():
        for tool, version in sorted((stage.get("fingerprint") or {}).items()):
            versions.setdefault(tool, str(version))
    return {
        "quantization": quantization,
        "toolchain": ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
    }


def from_lock(
    lock: dict[str, Any],
    source: str,
    label: str,
    time: datetime,
    lock_file: str,
    trust: Trust,
    commit: str | None = None,
) -> AuditEntry:
    """An entry from a lock file's content (format 1 or 2), judged by `trust`: `signed_by` names who
    signed the records each variant's verdicts rest on, and verdicts resting on records not from a
    trusted builder read unknown (reconciler.trust)."""
    signed_by = {
        str(n): ", ".join(trust.signers(v)) or "unsigned"
        for n, v in mapping(lock.get("variants")).items()
        if isinstance(v, dict)
    }
    read = LockView.from_json(trust.vetted(lock) or lock)
    variants = read.variants
    default = variants.get("default") or next(iter(variants.values()), None)
    stages = default.stages if default is not None else {}
    imported = stages.get("import")
    model_artifact = imported.artifacts.get("model") if imported is not None else None
    verdicts = [v for name in sorted(variants) for v in variants[name].verdicts]
    files = read.sources.files if read.sources is not None else None
    return AuditEntry(
        source=source,
        label=label,
        time=time,
        spec=read.spec or "?",
        target=read.target or "?",
        lock_file=lock_file,
        status=read.health or str(lock.get("status", "?")),  # status: lock format 1
        model_version=read.model.version,
        model_digest=model_artifact.digest if model_artifact is not None else None,
        model_file_digest=(files or {}).get("model"),
        import_key=read.model.import_key,
        verdicts=verdicts,
        measurements={name: v.raw_measurements for name, v in sorted(variants.items())},
        toolchains=toolchains(stages),
        commit=commit,
        settings=settings(stages, toolchains(stages)),
        signed_by=signed_by,
    )
