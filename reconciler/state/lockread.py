"""Reading a committed lock file back as typed records: the one place that knows the lock's layout.

Plan, apply and status treat a stage whose key equals the one recorded in the lock as up to date
even when the local store never held its bytes (a fresh CI checkout); a lost state.db can be
reseeded from the same records. A record read from a lock names its artifacts by digest only:
`in_store` says whether the bytes are here.

The classes here are the reading side of reconciler.records.lock (whose pydantic models validate what
is written and generate the schema): the same fields by name (a test checks it), built from parsed
JSON without loading pydantic, since a no-op plan reads every lock. Readers use attributes, so a
renamed field is a type error rather than a silent None. A part of the wrong JSON type reads as
absent (lock integrity reports it); `raw` keeps what was committed for the writers that carry it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reconciler.records.judged import Judged, verdicts
from reconciler.records.measured import Measured, measurements, number, text
from reconciler.state import lockfile
from reconciler.state.db import Record

LOCK_NOTE = "recorded in the lock"
"""The note of a record read from a lock file (never stored in state.db as built here)."""

JSONObject = dict[str, Any]
"""A JSON object as parsed: what a lock is before it is read through the classes below."""

Vet = Callable[[JSONObject], dict[str, str]]
"""Given a variant's entry, the stages whose records do not count here and why
(reconciler.trust.signing.Trust.distrusted)."""


def _object(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class LockedArtifact:
    """A stage's output as the lock names it (reconciler.records.stage.Artifact)."""

    digest: str
    file: str
    size: int

    @classmethod
    def from_json(cls, data: object) -> LockedArtifact | None:
        entry = _object(data)
        digest, size = text(entry.get("digest")), number(entry.get("size"))
        if digest is None:
            return None
        return cls(digest, text(entry.get("file")) or "", int(size or 0))

    def to_json(self) -> JSONObject:
        return {"digest": self.digest, "file": self.file, "size": self.size}


@dataclass(frozen=True, slots=True)
class LockedSignature:
    """Who vouches for a stage record (reconciler.records.stage.Signature; reconciler.trust)."""

    key: str
    sig: str

    @classmethod
    def from_json(cls, data: object) -> LockedSignature | None:
        entry = _object(data)
        key, sig = text(entry.get("key")), text(entry.get("sig"))
        return None if key is None or sig is None else cls(key, sig)


@dataclass(frozen=True)
class LockedStage:
    """One stage of a variant (reconciler.records.stage.StageRecord), with its name."""

    name: str
    key: str
    artifacts: dict[str, LockedArtifact]
    identity: bool
    impl: JSONObject
    inputs: JSONObject
    """The key inputs it was built from (lock format 2); {} in older lock files."""
    signed: LockedSignature | None = None
    """The builder's signature (whether it counts is reconciler.trust's to say, from `raw`)."""

    @classmethod
    def from_json(cls, name: str, data: object) -> LockedStage | None:
        entry = _object(data)
        key = text(entry.get("key"))
        if key is None:
            return None
        artifacts = {
            str(n): a
            for n, a in ((n, LockedArtifact.from_json(a)) for n, a in _object(entry.get("artifacts")).items())
            if a is not None
        }
        return cls(
            name,
            key,
            artifacts,
            bool(entry.get("identity")),
            _object(entry.get("impl")),
            _object(entry.get("inputs")),
            LockedSignature.from_json(entry.get("signed")),
        )

    def artifacts_json(self) -> dict[str, JSONObject]:
        """Name -> {"digest", "file", "size"}: the artifacts as a stage record (state.db) holds them."""
        return {name: artifact.to_json() for name, artifact in self.artifacts.items()}


@dataclass(frozen=True, slots=True)
class OtherRunner:
    """After `apply --remeasure`: another runner's measurements of the same build."""

    runner: str
    measurements: dict[str, Measured]
    raw: JSONObject

    @classmethod
    def from_json(cls, data: object) -> OtherRunner | None:
        entry = _object(data)
        runner = text(entry.get("runner"))
        return None if runner is None else cls(runner, measurements(entry.get("measurements")), entry)


@dataclass(frozen=True, slots=True)
class LockedInput:
    """One input as the deployed artifact declares it (reconciler.records.lock.ArtifactInput)."""

    name: str
    dtype: str | None
    shape: list[int] | None
    raw: JSONObject
    """As committed (an open record: a backend may add keys), for the export manifest."""

    @classmethod
    def from_json(cls, data: object) -> LockedInput | None:
        entry = _object(data)
        name, shape = text(entry.get("name")), entry.get("shape")
        if name is None:
            return None
        dims = (
            [int(d) for d in shape]
            if isinstance(shape, list) and all(_int(d) is not None for d in shape)
            else None
        )
        return cls(name, text(entry.get("dtype")), dims, entry)


@dataclass
class LockedVariant:
    """One shape variant's build as the lock records it (reconciler.records.lock.LockVariant)."""

    name: str
    inputs: dict[str, list[int]] = field(default_factory=dict)
    artifact_inputs: list[LockedInput] = field(default_factory=list)
    """The inputs the deployed artifact itself declares, where its compile stage read them back."""
    stages: dict[str, LockedStage] = field(default_factory=dict)
    measurements: dict[str, Measured] = field(default_factory=dict)
    verdicts: list[Judged] = field(default_factory=list)
    other_measurements: list[OtherRunner] = field(default_factory=list)
    verdicts_measured_on: str | None = None
    raw: JSONObject = field(default_factory=dict)
    """The variant's entry exactly as committed (carried over whole when a build cannot finish)."""
    distrusted: dict[str, str] = field(default_factory=dict)
    """Stage -> why its record does not count (not from a trusted builder): left out of `stages`."""

    @property
    def untrusted(self) -> str | None:
        """Why the variant's verdicts count for nothing (the first stage not trusted), or None."""
        return next(iter(self.distrusted.values()), None)

    def vetted(self, vet: Vet) -> LockedVariant:
        """The variant without the stages `vet` distrusts (they read as not recorded)."""
        distrusted = vet(self.raw)
        if not distrusted:
            return self
        stages = {n: s for n, s in self.stages.items() if n not in distrusted}
        return replace(self, stages=stages, distrusted=distrusted)

    @classmethod
    def from_json(cls, name: str, entry: JSONObject) -> LockedVariant:
        stages = (LockedStage.from_json(str(n), s) for n, s in _object(entry.get("stages")).items())
        others, declared = entry.get("other_measurements"), entry.get("artifact_inputs")
        return cls(
            name,
            _object(entry.get("inputs")),
            [i for i in map(LockedInput.from_json, declared if isinstance(declared, list) else []) if i],
            {s.name: s for s in stages if s is not None},
            measurements(entry.get("measurements")),
            verdicts(entry.get("verdicts")),
            [o for o in map(OtherRunner.from_json, others if isinstance(others, list) else []) if o],
            text(entry.get("verdicts_measured_on")),
            entry,
        )

    @property
    def raw_measurements(self) -> JSONObject:
        """The measurements exactly as committed: what a rewritten lock carries."""
        return _object(self.raw.get("measurements"))

    def record(self, stage: str) -> Record | None:
        """The stage as a record; evaluate carries the variant's recorded measurements."""
        locked = self.stages.get(stage)
        if locked is None:
            return None
        report = {"measurements": self.raw_measurements} if stage == "evaluate" else {}
        return Record(
            locked.key,
            stage,
            locked.inputs,
            locked.artifacts_json(),
            report,
            locked.key,
            ("identity: " if locked.identity else "") + LOCK_NOTE,
        )


@dataclass(frozen=True, slots=True)
class LockedModel:
    version: str | None
    import_key: str | None


@dataclass(frozen=True, slots=True)
class LockedSources:
    """Digest of the merged spec section and of each input file the lock was built from."""

    spec_digest: str | None
    files: dict[str, str | None] | None


@dataclass(frozen=True)
class LockView:
    """A whole lock file (reconciler.records.lock.LockFile), read."""

    format_version: int | None
    spec: str
    file: str
    target: str
    model: LockedModel
    slo: JSONObject | None
    """The spec's slo section the verdicts were judged against, as the spec writes it."""
    sync: str
    health: str
    variants: dict[str, LockedVariant]
    sources: LockedSources | None
    raw: JSONObject
    """The file as parsed: what an unchanged-lock check compares and a carried-over field copies."""

    @classmethod
    def from_json(cls, data: JSONObject) -> LockView:
        model, sources = _object(data.get("model")), data.get("sources")
        slo = data.get("slo")
        return cls(
            _int(data.get("format_version")),
            text(data.get("spec")) or "",
            text(data.get("file")) or "",
            text(data.get("target")) or "",
            LockedModel(text(model.get("version")), text(model.get("import_key"))),
            slo if isinstance(slo, dict) else None,
            text(data.get("sync")) or "",
            text(data.get("health")) or "",
            variants(data),
            _sources(sources) if isinstance(sources, dict) else None,
            data,
        )

    def variant(self, name: str) -> LockedVariant:
        return self.variants.get(name) or LockedVariant(name)

    def vetted(self, vet: Vet) -> LockView:
        """The lock with every variant's distrusted stages left out (reconciler.trust)."""
        return replace(self, variants={n: v.vetted(vet) for n, v in self.variants.items()})

    @property
    def verdicts(self) -> list[Judged]:
        """Every variant's recorded verdicts, in the lock's order."""
        return [v for variant in self.variants.values() for v in variant.verdicts]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sources(data: JSONObject) -> LockedSources:
    files = data.get("files")
    read = {str(k): text(v) for k, v in files.items()} if isinstance(files, dict) else None
    return LockedSources(text(data.get("spec_digest")), read)


def view(data: JSONObject | None) -> LockView | None:
    return None if data is None else LockView.from_json(data)


def read(path: Path) -> LockView | None:
    """The lock file at `path`, read; None when absent. An unreadable one raises LockUnreadable
    (reconciler.state.lockfile.read): it is never taken for an absent one."""
    return view(lockfile.read(path))


def variants(lock: JSONObject | None) -> dict[str, LockedVariant]:
    """Variant name -> what the lock records for it; {} for no lock or a malformed one."""
    entries = _object((lock or {}).get("variants"))
    return {str(n): LockedVariant.from_json(str(n), e) for n, e in entries.items() if isinstance(e, dict)}


def variant(lock: LockView | None, name: str) -> LockedVariant:
    return lock.variant(name) if lock is not None else LockedVariant(name)


def is_lock_record(record: Record | None) -> bool:
    return record is not None and record.note.endswith(LOCK_NOTE)


class LockIndex:
    """Every stage key the repository's committed lock files record, across specs: specs that share a
    model share keys, so a spec added in a pull request finds its stages on any clone alike.

    Filled on the first lookup (`defer`): a stage found in the local store or in its own spec's lock
    never needs the others, so a plan of one changed spec reads no other lock file."""

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[LockedVariant, str]] = {}
        self._pending: Callable[[], Iterable[LockView | None]] | None = None
        self.lookups = 0
        """How many lookups were made: an answer that made one depends on every lock file."""

    def defer(self, locks: Callable[[], Iterable[LockView | None]]) -> None:
        """The lock files to index, read when the first lookup needs them."""
        self._pending = locks

    def add(self, lock: LockView | None) -> None:
        for locked in (lock.variants if lock is not None else {}).values():
            for stage in locked.stages.values():
                self._by_key.setdefault(stage.key, (locked, stage.name))

    def record(self, key: str) -> Record | None:
        self.lookups += 1
        pending, self._pending = self._pending, None
        for lock in pending() if pending is not None else ():
            self.add(lock)
        hit = self._by_key.get(key)
        return hit[0].record(hit[1]) if hit else None
