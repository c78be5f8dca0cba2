"""Reading a committed lock file back as records: the one place that knows the lock's stage layout.

Plan, apply and status treat a stage whose key equals the one recorded in the lock as up to date
even when the local store never held its bytes (a fresh CI checkout); a lost state.db can be
reseeded from the same records. A record read from a lock names its artifacts by digest only:
`in_store` says whether the bytes are here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reconciler.state.db import Record

Vet = Callable[[dict[str, Any]], dict[str, str]]
"""Given a variant's entry, the stages whose records do not count here and why
(reconciler.trust.signing.Trust.distrusted): they are read as not recorded."""

LOCK_NOTE = "recorded in the lock"
"""The note of a record read from a lock file (never stored in state.db as built here)."""


@dataclass(frozen=True)
class LockedStage:
    name: str
    key: str
    artifacts: dict[str, dict[str, Any]]
    inputs: dict[str, Any]
    """The key inputs it was built from (lock format 2); {} in older lock files."""
    identity: bool


@dataclass
class LockedVariant:
    name: str
    stages: dict[str, LockedStage] = field(default_factory=dict)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    """The variant's entry exactly as committed (carried over whole when a build cannot finish)."""
    distrusted: dict[str, str] = field(default_factory=dict)
    """Stage -> why its record does not count (not from a trusted builder): left out of `stages`."""

    @property
    def untrusted(self) -> str | None:
        """Why the variant's verdicts count for nothing (the first stage not trusted), or None."""
        return next(iter(self.distrusted.values()), None)

    def record(self, stage: str) -> Record | None:
        """The stage as a record; evaluate carries the variant's recorded measurements."""
        locked = self.stages.get(stage)
        if locked is None or not isinstance(locked.key, str):
            return None
        report = {"measurements": self.measurements} if stage == "evaluate" else {}
        return Record(
            locked.key,
            stage,
            locked.inputs,
            locked.artifacts,
            report,
            locked.key,
            ("identity: " if locked.identity else "") + LOCK_NOTE,
        )


def _stage(name: str, entry: Any) -> LockedStage | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return None
    artifacts, inputs = entry.get("artifacts"), entry.get("inputs")
    artifacts = artifacts if isinstance(artifacts, dict) else {}
    inputs = inputs if isinstance(inputs, dict) else {}
    return LockedStage(name, entry["key"], artifacts, inputs, bool(entry.get("identity")))


def variants(lock: dict[str, Any] | None, vet: Vet) -> dict[str, LockedVariant]:
    """Variant name -> what the lock records for it, without the stages `vet` distrusts; {} for no
    lock or a malformed one."""
    out: dict[str, LockedVariant] = {}
    raw_variants = (lock or {}).get("variants")
    if not isinstance(raw_variants, dict):
        return out
    for name, entry in raw_variants.items():
        if not isinstance(entry, dict):
            continue
        variant = LockedVariant(str(name), raw=entry, distrusted=vet(entry))
        for stage_name, stage_entry in (entry.get("stages") or {}).items():
            stage = _stage(str(stage_name), stage_entry)
            if stage is not None and stage.name not in variant.distrusted:
                variant.stages[stage.name] = stage
        measurements = entry.get("measurements")
        variant.measurements = measurements if isinstance(measurements, dict) else {}
        verdicts = entry.get("verdicts")
        variant.verdicts = [v for v in verdicts if isinstance(v, dict)] if isinstance(verdicts, list) else []
        out[variant.name] = variant
    return out


def variant(lock: dict[str, Any] | None, name: str, vet: Vet) -> LockedVariant:
    return variants(lock, vet).get(name) or LockedVariant(name)


def is_lock_record(record: Record | None) -> bool:
    return record is not None and record.note.endswith(LOCK_NOTE)


class LockIndex:
    """Every stage key the repository's committed lock files record, across specs: specs that share a
    model share keys, so a spec added in a pull request finds its stages on any clone alike."""

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[LockedVariant, str]] = {}

    def add(self, lock: dict[str, Any] | None, vet: Vet) -> None:
        for locked in variants(lock, vet).values():
            for stage in locked.stages.values():
                self._by_key.setdefault(stage.key, (locked, stage.name))

    def record(self, key: str) -> Record | None:
        hit = self._by_key.get(key)
        return hit[0].record(hit[1]) if hit else None
