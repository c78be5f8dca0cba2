"""A verdict: one SLO judged on the recorded measurements (reconciler.engine.verify).

The lock records it without `carried_over` and `predicted`, which describe one run on one machine;
plan and apply `--json` print them when they apply.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from backends.sdk.vocab import EvidenceKind, Verdict
from reconciler.records._base import Number, Omittable, OneOf, Record, described, optional

VerdictWord = Annotated[str, OneOf(tuple(v.word for v in Verdict))]
"""A word of backends.sdk.vocab.Verdict: the vocabulary is defined there, with each word's mark and tone."""

Comparison = Literal["<=", ">="]

VerdictEvidence = Annotated[str, Field(pattern="^(" + "|".join(k.value for k in EvidenceKind) + ")")]
"""An evidence text: it starts with a backends.sdk.vocab.EvidenceKind and may go on naming who or what
measured (`measured:host simulator`, `estimated: vela`)."""


class VerdictRecord(Record):
    name: str = described("the SLO path, e.g. latency_ms.p90")
    variant: str
    threshold: Number
    comparison: Comparison
    value: Number | None
    passed: bool | None = described(
        "true only when met on a measurement; null when unverified or met only on an estimate"
    )
    evidence: VerdictEvidence | None
    verdict: VerdictWord
    detail: str
    carried_over: Omittable[Literal[True]] = optional(
        "judged on evidence carried over from the committed lock, not re-verified here "
        "(absent otherwise; never in a lock file)"
    )
    predicted: Omittable[str] = optional(
        'plan: how the outcome differs from the lock\'s ("pass -> fail", "new -> pass")'
    )
