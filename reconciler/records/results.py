"""What plan, apply and status print with `--json`: per spec its stages, verdicts and measurements.

Built by reconciler.engine.results (SpecResult.to_json) and the status command; the schemas in
`schemas/` are generated from these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from reconciler.engine.health import HEALTH_STATES, STATUSES, SYNC_STATES
from reconciler.engine.stages import ORDER, VERIFY
from reconciler.records._base import Count, Digest, Number, Omittable, OneOf, OpenRecord, Record, optional
from reconciler.records.measurement import Measurements
from reconciler.records.verdict import VerdictRecord

StageName = Annotated[str, OneOf((*ORDER, VERIFY))]
Sync = Annotated[str, OneOf(SYNC_STATES, "are the artifacts those the spec asks for")]
Health = Annotated[
    str, OneOf(HEALTH_STATES, "are the SLOs met (Progressing: an apply holds the spec right now)")
]
Status = Annotated[str, OneOf(STATUSES)]
"""One word from reconciler.engine.health.status."""


class StageRow(Record):
    """One stage of one variant: what the command did (or would do) and why."""

    name: StageName
    variant: str
    key: Omittable[Digest] = optional()
    reason: str
    identity: Omittable[bool] = optional()
    log: Omittable[str] = optional()
    duration_ms: Omittable[Number] = optional()
    note: Omittable[str] = optional("apply: the backend's summary of a built stage")


class PlanStage(StageRow):
    action: Literal["build", "cached", "rejudge", "stalled"]


class ApplyStage(StageRow):
    action: Literal["built", "cached", "failed", "skipped"]


S = TypeVar("S", bound=StageRow)


class SpecRow(Record, Generic[S]):
    """One spec: its stages, its SLOs' verdicts, its measurements per variant, its status."""

    name: str
    file: Omittable[str] = optional()
    target: str
    status: Status
    sync: Omittable[Sync] = optional()
    health: Omittable[Health] = optional()
    carried_over: Omittable[list[str]] = optional()
    lock_problems: Omittable[list[str]] = optional()
    errors: Omittable[list[str]] = optional()
    ran_on: Omittable[str] = optional("apply --executor ray: the Ray node that built it")
    stages: list[S]
    slo: list[VerdictRecord]
    measurements: Omittable[dict[str, Measurements]] = optional("variant -> measurement name -> measurement")
    throughput_fps: Omittable[dict[str, Number]] = optional(
        "variant -> frames per second: batch x 1000 / the measured mean latency in ms"
    )


class BaseSpec(OpenRecord):
    name: str
    change: Any


class BaseComparison(OpenRecord):
    """`plan --base REF`: per spec the field diff, stages and SLO deltas against REF."""

    ref: str
    commit: str
    specs: list[BaseSpec]


class ApplyOutput(Record):
    format_version: Literal[1]
    command: Omittable[Literal["apply"]] = optional()
    specs: list[SpecRow[ApplyStage]]


class PlanOutput(Record):
    format_version: Literal[1]
    command: Omittable[Literal["plan"]] = optional()
    specs: list[SpecRow[PlanStage]]
    base: Omittable[BaseComparison] = optional()


class StatusRow(Record):
    name: str
    target: str
    status: Status
    sync: Sync
    health: Health
    reason: str
    carried_over: Omittable[list[str]] = optional()
    lock_problems: Omittable[list[str]] = optional()
    verdicts: list[dict[str, Any]]
    slo_passed: Omittable[int] = optional()
    slo_total: Omittable[Count] = optional()
    throughput_fps: Omittable[dict[str, Number]] = optional(
        "variant -> frames per second: batch x 1000 / the measured mean latency in ms"
    )


class StatusOutput(Record):
    format_version: Literal[1]
    specs: list[StatusRow]
