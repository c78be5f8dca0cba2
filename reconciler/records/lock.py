"""The lock file, specs/NAME.lock.json: what apply built and measured for a spec, committed beside it.

Deterministic (sorted keys, no timestamps; reconciler.state.lockfile writes it), so a no-op apply
leaves it byte-identical and a pull-request diff shows exactly what changed.
"""

from __future__ import annotations

from typing import Annotated, Any

from reconciler.engine.health import DEGRADED, HEALTHY, OUT_OF_SYNC, SYNCED, UNKNOWN
from reconciler.records._base import Digest, Omittable, OneOf, OpenRecord, Record, described, optional
from reconciler.records.lock_format import FORMAT_VERSION as FORMAT_VERSION
from reconciler.records.lock_format import LockFormat
from reconciler.records.measurement import Measurements
from reconciler.records.stage import StageRecord
from reconciler.records.verdict import VerdictRecord


class ModelRef(OpenRecord):
    version: str | None
    import_key: str | None


class OtherRunner(OpenRecord):
    runner: str
    measurements: Measurements


class ArtifactInput(OpenRecord):
    """One input as the deployed artifact declares it (its compile stage read it back from the artifact)."""

    name: str
    dtype: str | None = described("the element type the artifact takes, in its toolchain's words")
    shape: list[int] | None = described("the shape the artifact takes")


class LockVariant(Record):
    """One shape variant's build: its stages, measurements and verdicts."""

    inputs: dict[str, list[int]] = described("input name -> the shape this variant was built for")
    artifact_inputs: Omittable[list[ArtifactInput]] = optional(
        "the inputs the deployed artifact itself declares, where its compile stage read them back "
        "(folded preprocessing changes them from the model's): what an app feeds"
    )
    stages: dict[str, StageRecord]
    measurements: Measurements
    verdicts: list[VerdictRecord]
    other_measurements: Omittable[list[OtherRunner]] = optional(
        "after `apply --remeasure`: other runners' measurements of the same build"
    )
    verdicts_measured_on: str | None = optional("the runner the verdicts used")


class Sources(OpenRecord):
    """What the lock was built from: digest of the merged spec section and of each input file (model,
    calibration_data, eval_data, labels); lets a reader without local state tell whether the lock
    still matches its spec."""

    spec_digest: Omittable[Digest] = optional()
    files: Omittable[dict[str, str | None]] = optional()


class LockFile(Record):
    format_version: LockFormat
    spec: str
    file: str
    target: str
    model: ModelRef
    slo: dict[str, Any] | None
    sync: Annotated[
        str,
        OneOf(
            (SYNCED, OUT_OF_SYNC), "Synced: the recorded stages were built from this spec's fields and files"
        ),
    ]
    health: Annotated[str, OneOf((HEALTHY, DEGRADED, UNKNOWN), "of the recorded verdicts")]
    variants: dict[str, LockVariant]
    sources: Omittable[Sources] = optional()
