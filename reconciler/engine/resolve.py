"""Where a stage's result comes from without building it: the local store, or the committed lock file.

Shared by plan (which only looks) and apply (which builds what resolves to nothing). A stage is up to
date when its key has a usable local record, or when the key equals the one the lock records
(`lock`): its artifacts are then known by digest, and their bytes are needed only when a later stage
must build. A stage this machine cannot run (its toolchain is missing, so its key cannot even be
computed the same way) whose recorded inputs match the spec in every field, file and upstream digest
is `carried`: the committed evidence stands, not re-verified here. So is one whose recorded inputs
differ from this machine's only in the facts of the machine that built it (fingerprint entries a
backend names `host_*`: its ISA, its int8 kernels, its kernel and CPUs, what its toolchain installer
resolved beyond the pins): another machine's build of the same thing, kept until a later stage needs
its bytes here or `apply --remeasure` rebuilds it, so machines of two kinds do not rewrite one lock
back and forth. With a remote cache, a key with no
usable local record is looked up there before the lock: apply downloads it (`fetched`, then an
ordinary local record), plan only reads the record (`remote`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.sdk.errors import ToolchainMissing
from reconciler.engine import keys
from reconciler.engine.chain import StageSetup
from reconciler.engine.walk import Artifacts, identity_outputs, link_upstream
from reconciler.engine.workspace import Workspace
from reconciler.remote import layer
from reconciler.repo import Layout
from reconciler.state.db import Record
from reconciler.state.lockfile import LockUnreadable
from reconciler.state.lockread import LockedVariant, LockView

SPEC_SIDE = ("stage", "fields", "files", "upstream", "target")
"""The key inputs a machine without the stage's toolchain still knows (everything but `impl`)."""

MACHINE_FACT = "host_"
"""The prefix of a fingerprint entry that is a fact of the building machine, not of the spec or pins."""


class Source(str, Enum):
    """Where a stage's result comes from when it is not built in this walk.

    Each value is found (a record stands for the key) except `missing` (no record: the stage builds)
    and `unknown` (an upstream stage is not known yet, so neither is the key).
    """

    STORE = "store"
    """A usable record in the local store (or one reseeded into it from the lock)."""
    FETCHED = "fetched"
    """Downloaded from the remote cache by apply, verified: an ordinary local record from now on."""
    REMOTE = "remote"
    """In the remote cache, read by plan without downloading."""
    LOCK = "lock"
    """The key the committed lock records: artifacts known by digest, bytes fetched only when needed."""
    CARRIED = "carried"
    """The lock's evidence stands without being re-verified here (see the module docstring)."""
    IDENTITY = "identity"
    """An inactive stage: its outputs are its inputs."""
    MISSING = "missing"
    UNKNOWN = "unknown"

    @property
    def found(self) -> bool:
        return self not in (Source.MISSING, Source.UNKNOWN)


@dataclass
class Resolved:
    setup: StageSetup
    key: str | None
    """None while an upstream stage is still unknown."""
    record: Record | None
    source: Source
    key_inputs: dict[str, Any] | None = None
    note: str = ""
    """Why a `carried` record stands without being re-verified here."""

    @property
    def found(self) -> bool:
        return self.source.found


def spec_side_matches(recorded: dict[str, Any], current: dict[str, Any]) -> bool:
    return bool(recorded) and all(recorded.get(k) == current.get(k) for k in SPEC_SIDE)


def carried_reason(setup: StageSetup) -> str:
    return f"recorded in the lock; not re-verified on this machine: toolchain not installed: {setup.error}"


def _without_machine(inputs: dict[str, Any]) -> dict[str, Any]:
    impl = dict(inputs.get("impl") or {})
    fingerprint = impl.get("fingerprint") or {}
    impl["fingerprint"] = {k: v for k, v in fingerprint.items() if not k.startswith(MACHINE_FACT)}
    return {**inputs, "impl": impl}


def machine_moves(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The machine facts that differ between a recorded build and this machine's, when nothing else
    does (else none): `host_isa x86_64-avx2 -> x86_64-avx512f`."""
    if not recorded:
        return []
    current = json.loads(json.dumps(current))  # tuples as the lock file holds them
    if _without_machine(recorded) != _without_machine(current):
        return []
    was = (recorded.get("impl") or {}).get("fingerprint") or {}
    now = (current.get("impl") or {}).get("fingerprint") or {}
    return [f"{k} {was.get(k)} -> {now.get(k)}" for k in sorted({*was, *now}) if was.get(k) != now.get(k)]


def machine_reason(moves: list[str]) -> str:
    return (
        "recorded in the lock, built on a machine of another kind ("
        + "; ".join(moves)
        + "): not rebuilt here (`apply --remeasure` builds and measures it on this machine)"
    )


def resolve(
    ws: Workspace,
    setup: StageSetup,
    target: Target,
    outputs: dict[str, Artifacts | None],
    locked: LockedVariant,
) -> Resolved:
    """One stage, given the outputs of the stages before it; fills outputs[stage] when found."""
    name = setup.stage.name
    linked = link_upstream(setup, outputs)
    if linked is None:
        outputs[name] = None
        return Resolved(setup, None, None, Source.UNKNOWN)
    key_inputs = setup.key_inputs(target)
    key = keys.digest(key_inputs)
    record = ws.db.record(key)
    in_lock = locked.stages.get(name)
    own = locked.record(name) if in_lock is not None and in_lock.key == key else None
    from_locks = _LockLookup(ws, key, key_inputs, own)
    if not setup.active:
        outputs[name] = identity_outputs(setup, linked)
        return Resolved(setup, key, record or from_locks(), Source.IDENTITY, key_inputs)
    moves = machine_moves(in_lock.inputs, key_inputs) if own is None and in_lock else []
    if in_lock is not None and moves and setup.error is None and from_locks() is None:
        outputs[name] = (
            in_lock.artifacts_json()
        )  # before this machine's own build: the lock stays as committed
        return Resolved(setup, key, locked.record(name), Source.CARRIED, key_inputs, machine_reason(moves))
    if ws.usable(record):
        outputs[name] = record.artifacts if record else None
        return Resolved(setup, key, record, Source.STORE, key_inputs)
    lock_record = from_locks()
    if record is None and lock_record is not None and ws.usable(lock_record):
        ws.db.put_record(lock_record)  # a lost state.db reseeded from the lock file and the store
        outputs[name] = lock_record.artifacts
        return Resolved(setup, key, lock_record, Source.STORE, key_inputs)
    wanted = ws.remote_fetch or lock_record is None  # plan: what the lock records needs no network
    if ws.remote is not None and wanted and (hit := layer.lookup(ws, key, key_inputs, lock_record)):
        outputs[name] = hit.artifacts
        return Resolved(setup, key, hit, Source.FETCHED if ws.remote_fetch else Source.REMOTE, key_inputs)
    if lock_record is not None:
        outputs[name] = lock_record.artifacts
        return Resolved(setup, key, lock_record, Source.LOCK, key_inputs)
    if (
        isinstance(setup.error, ToolchainMissing)
        and in_lock is not None
        and spec_side_matches(in_lock.inputs, key_inputs)
    ):
        carried = locked.record(name)
        outputs[name] = in_lock.artifacts_json()
        return Resolved(setup, key, carried, Source.CARRIED, key_inputs, carried_reason(setup))
    outputs[name] = None
    return Resolved(setup, key, None, Source.MISSING, key_inputs)


class _LockLookup:
    """The record a lock file keeps for `key` (the spec's own lock first, then every other one), looked
    up once and only when asked: a stage found in the local store reads no other lock file."""

    def __init__(self, ws: Workspace, key: str, key_inputs: dict[str, Any], own: Record | None) -> None:
        self._ws, self._key, self._inputs, self._own = ws, key, key_inputs, own
        self._done = False
        self._found: Record | None = None

    def __call__(self) -> Record | None:
        if not self._done:
            found = self._own or self._ws.locks.record(self._key)
            self._found = None if found is None else replace(found, key_inputs=self._inputs)  # their digest
            self._done = True
        return self._found


def walk(
    ws: Workspace,
    chain: list[StageSetup],
    target: Target,
    locked: LockedVariant,
    outputs: dict[str, Artifacts | None] | None = None,
) -> Iterator[Resolved]:
    """Resolves each stage in order, as far as what is recorded reaches."""
    known = dict(outputs or {})
    for setup in chain:
        yield resolve(ws, setup, target, known, locked)


def first_to_build(
    ws: Workspace,
    chain: list[StageSetup],
    target: Target,
    locked: LockedVariant,
    outputs: dict[str, Artifacts | None],
    also: frozenset[str] = frozenset(),
) -> str | None:
    """The first stage of `chain` that must build (or is named in `also`), or None: when None, the
    stages before it may stay recorded-only, since no later stage needs their bytes."""
    for resolved in walk(ws, chain, target, locked, outputs):
        name = resolved.setup.stage.name
        if not resolved.found or (name in also and resolved.setup.active):
            return name
    return None


def index_locks(ws: Workspace, spec_files: Sequence[Path]) -> None:
    """Adds the committed lock file of every spec file to `ws.locks` on its first lookup, skipping any
    that fails its integrity checks or cannot be read (that spec stalls on it; the others go on)."""

    def locks() -> Iterator[LockView | None]:
        for file in spec_files:
            try:
                lock, problems = ws.committed_lock(Layout.lock_file(file))
            except LockUnreadable:
                continue
            if lock is not None and not problems:
                yield lock  # vetted by committed_lock: reconciler.trust

    ws.locks.defer(locks)
