"""A measurement: one figure of a build (latency, accuracy, size, coverage) with what it rests on.

Recorded in the lock per variant and printed by plan/apply `--json`. Its `digest` signs its record,
value, evidence, detail and runner (reconciler.engine.measurements), so a hand edit shows. Open: a
backend's report may add keys, which are kept as reported.
"""

from __future__ import annotations

from reconciler.records._base import Digest, Number, Omittable, OpenRecord, described, optional


class Measurement(OpenRecord):
    value: Number | None = described(
        "null: nothing could be measured; `detail` says why and `verdict` what that gives"
    )
    evidence: str = described(
        "how the value was obtained: a backends.sdk.vocab.EvidenceKind (measured:device, measured:host, "
        "estimated, not measured), which may go on naming who or what measured"
    )
    detail: Omittable[str] = optional()
    record: Omittable[Digest] = optional("key of the stage record it came from")
    runner: Omittable[str] = optional("who measured: runner, device model/serial, CPU, python")
    digest: Omittable[Digest] = optional("sha256 over record, value, evidence, detail, runner")
    measure: Omittable[str] = optional(
        "accuracy: the task and its measure (`detection box_f1@0.5`, `generic cosine`)"
    )
    on_target: Omittable[bool] = optional(
        "false: timed on a CPU for a target with an NPU (evidence about that CPU, never a pass)"
    )
    host: Omittable[str] = optional("with on_target false: the runtime and CPU that measured")
    assumed: Omittable[str] = optional(
        "what the value rests on that was neither measured nor published (an assumed clock): "
        "its verdict is never a pass or a fail"
    )
    verdict: Omittable[str] = optional("with no value: the verdict it gives (unknown, unverified)")


Measurements = dict[str, Measurement]
"""Measurement name (`latency_ms.p90`, `accuracy`, `accuracy.reference`, `size_mb`, ...) -> measurement."""
