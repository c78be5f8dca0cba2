"""A verdict: one SLO judged on the recorded measurements (reconciler.engine.verify).

The lock records it without `carried_over` and `predicted`, which describe one run on one machine;
plan and apply `--json` print them when they apply.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from reconciler.records._base import Number, Omittable, Record, described, optional

VerdictWord = Literal[
    "pass",
    "fail",
    "met on estimate",
    "fail (estimated)",
    "met on host CPU",
    "missed on host CPU",
    "met on an assumption",
    "missed on an assumption",
    "unknown",
    "unverified",
]
"""Every word a verdict may say; only "pass" reads as met on a measurement."""

Comparison = Literal["<=", ">="]

VerdictEvidence = Annotated[str, Field(pattern="^(measured:device|measured:host|estimated)( .*)?$")]


class VerdictRecord(Record):
    name: str
    """The SLO path, e.g. latency_ms.p90."""
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
