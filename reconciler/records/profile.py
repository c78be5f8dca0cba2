"""What `explain SPEC --profile --json` prints: per variant, evaluate's per-layer profile (profile.json,
backends.profiles) or why there is none."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from reconciler.records._base import Count, NonNegative, Number, Omittable, OpenRecord, Record, optional

Estimated = Annotated[str, Field(pattern="^estimated")]


class NoProfile(Record):
    missing: str


class ProfileLatency(OpenRecord):
    timed_p50: Omittable[Number | None] = optional()
    profiled_p50: Omittable[Number | None] = optional()
    runtime_p50: Omittable[Number | None] = optional()


class Layer(OpenRecord):
    name: str
    op_type: str | None
    onnx_nodes: list[str]
    inserted: Omittable[bool] = optional()
    device: Literal["NPU", "CPU"]
    placement: Omittable[str | None] = optional()
    precision: Omittable[str | None] = optional()
    time_ms: NonNegative
    macs: Omittable[Count] = optional()
    bytes: Omittable[Count] = optional()


class Attribution(OpenRecord):
    layers_sum_ms: object
    shares: dict[str, Number | None]
    top: Annotated[list[object], Field(max_length=10)]
    op_types: object
    utilisation_estimate: Omittable[Number | None] = optional()
    utilisation_note: Estimated


class Suggestion(OpenRecord):
    field: str
    expected_gain_ms: Number
    share: Omittable[Number] = optional()
    why: str
    evidence: Estimated


class Profile(OpenRecord):
    format_version: Literal[1]
    runtime: str
    evidence: str
    how: str
    runs: Count
    latency_ms: ProfileLatency
    layers: list[Layer]
    evidence_of: dict[str, str]
    attribution: Attribution
    suggestions: Omittable[list[Suggestion]] = optional()


class ProfileOutput(Record):
    format_version: Literal[1]
    spec: str
    profiles: dict[str, NoProfile | Profile]
