"""What apply writes into specs/NAME.lock.json, and what it keeps when a build cannot finish here.

The lock holds nothing that depends on the machine that wrote it beyond the measurements themselves
(which name their runner): no errors of this run, no "not built here". A variant whose chain did not
complete (toolchain missing, infrastructure error, read-only store, full disk, crashed toolchain)
keeps its committed entry whole, re-judged against the spec's current SLOs; only a complete build
replaces it. That is what lets a no-op apply on any machine leave `git status` clean.
"""

from __future__ import annotations

from typing import Any

from reconciler.engine import health
from reconciler.engine.chain import StageSetup
from reconciler.engine.resolve import SPEC_SIDE
from reconciler.records import measured
from reconciler.records.judged import Judged
from reconciler.records.measured import Measurements
from reconciler.state import lockfile
from reconciler.state.db import Record
from reconciler.state.lockread import LockedVariant
from reconciler.trust import signing
from reconciler.trust.signing import Trust, mapping

MAX_OTHER_RUNNERS = 4
"""How many other runners' measurements a variant keeps after explicit re-measuring."""


def stage_entry(record: Record) -> dict[str, Any]:
    """The stage as the lock records it, as plain JSON: a plan compares it with the committed lock on
    every run, so it is built without validation; `checked` validates it before a lock is written."""
    return {
        "key": record.key,
        "artifacts": record.artifacts,
        "identity": record.note.startswith("identity"),
        "impl": record.key_inputs.get("impl", {}),
        "inputs": record.key_inputs,
    }


def checked(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a whole lock file), once every stage entry validated against the lock format
    (reconciler.records.stage.StageRecord): a key that is no digest, or an artifact without its digest,
    file and size, fails here, never in a committed file. pydantic is imported here, when a lock is
    about to change, never by a no-op plan."""
    from reconciler.records.stage import StageRecord

    for variant in (data.get("variants") or {}).values():
        for entry in (variant.get("stages") or {}).values():
            StageRecord.model_validate(entry)
    return data


ARTIFACT_INPUTS = signing.ARTIFACT_INPUTS
"""The compile report's key, and the lock variant's, for the inputs the artifact itself declares."""


def variant_entry(
    inputs: dict[str, list[int]],
    records: dict[str, Record],
    verdicts: list[dict[str, Any]],
    measurements: dict[str, Any],
    trust: Trust,
    previous: LockedVariant,
    dry: bool = False,
) -> dict[str, Any]:
    """The variant as the lock records it, each stage signed (reconciler.trust.signing): a signature
    the committed entry holds over the same content is kept; a dry walk signs nothing new."""
    compiled = records.get("compile")
    declared = compiled.report.get(ARTIFACT_INPUTS) if compiled is not None else None
    declared = declared if isinstance(declared, list) and declared else None
    stages = {name: stage_entry(record) for name, record in sorted(records.items())}
    before = mapping(previous.raw.get("stages"))
    signed = trust.signed_stages(stages, measurements, before, fresh=not dry, declared=declared)
    entry: dict[str, Any] = {
        "inputs": inputs,
        "stages": signed,
        "measurements": measurements,
        "verdicts": verdicts,
    }
    if declared is not None:
        entry[ARTIFACT_INPUTS] = declared
    return entry


def measured_on(measurements: Measurements) -> str | None:
    """The runner identity the measurements name (evaluate's), if any."""
    return "; ".join(sorted({m.runner for m in measurements.values() if m.runner})) or None


def with_other_runners(entry: dict[str, Any], previous: LockedVariant | None) -> dict[str, Any]:
    """After explicit re-measuring: the previous runner's measurements stay beside the new ones.

    `measurements` (and so the verdicts) are this run's; `other_measurements` are the others',
    each naming its runner.
    """
    if previous is None:
        return entry
    now = measured_on(measured.measurements(entry["measurements"]))
    kept: list[dict[str, Any]] = []
    before = measured_on(previous.measurements)
    if before and before != now:
        kept.append({"runner": before, "measurements": previous.raw_measurements})
    for other in previous.other_measurements:
        if other.runner not in (now, before):
            kept.append(other.raw)
    if kept:
        entry = {**entry, "other_measurements": kept[:MAX_OTHER_RUNNERS], "verdicts_measured_on": now}
    return entry


def carried_entry(previous: LockedVariant, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """The committed entry, whole, with verdicts re-judged under the current SLOs."""
    return {**previous.raw, "verdicts": verdicts}


def recorded_matches(chain: list[StageSetup], previous: LockedVariant) -> bool:
    """Whether the committed stages were built from this spec's current fields and files.

    Upstream digests are compared where this run learned them; the implementation (which a machine
    without the toolchain cannot know) is not.
    """
    for setup in chain:
        locked = previous.stages.get(setup.stage.name)
        if locked is None or not locked.inputs:
            return False
        current = {
            "stage": setup.stage.name,
            "fields": setup.config,
            "files": setup.file_digests,
            "upstream": setup.upstream,
        }
        for part in SPEC_SIDE:
            if part in ("target", "upstream"):
                continue
            if locked.inputs.get(part) != current[part]:
                return False
        if setup.upstream and locked.inputs.get("upstream") != setup.upstream:
            return False
    return True


def lock_data(
    spec_name: str,
    file_name: str,
    target: str,
    model: dict[str, Any],
    slo: Any,
    sources: dict[str, Any],
    per_variant: dict[str, dict[str, Any]],
    synced: bool,
) -> dict[str, Any]:
    verdicts = [Judged.from_json(v) for entry in per_variant.values() for v in entry.get("verdicts", [])]
    return {
        "format_version": lockfile.FORMAT_VERSION,
        "spec": spec_name,
        "file": file_name,
        "target": target,
        "model": model,
        "slo": slo,
        "sync": health.SYNCED if synced else health.OUT_OF_SYNC,
        "health": health.of_verdicts(verdicts),
        "sources": sources,
        "variants": per_variant,
    }
