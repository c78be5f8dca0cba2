"""A verdict as the code holds it: one SLO judged on the measurements (reconciler.engine.verify).

The typed twin of reconciler.records.verdict.VerdictRecord without pydantic: verify makes them, plan
predicts from the ones a lock records, status, watch and the renderers print them. Its fields are the
record's, by name (a test checks it). `from_json` reads one back from a lock or a cached result; a
field of the wrong JSON type reads as absent, so a hand-edited lock never crashes a reader (lock
integrity reports the edit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reconciler.records.measured import Number, flag, number, text


@dataclass
class Judged:
    name: str
    """SLO path, e.g. latency_ms.p90"""
    variant: str
    threshold: Number
    comparison: str
    """<= or >="""
    value: Number | None
    passed: bool | None
    """True only when met on a measurement; None when unverified or met only on an estimate."""
    evidence: str | None
    verdict: str
    """A word of backends.sdk.vocab.Verdict."""
    detail: str = ""
    carried_over: bool = False
    """Judged on evidence carried over from the committed lock, not re-verified on this machine."""
    predicted: str | None = None
    """plan: the verdict the lock records, when the spec's threshold changed ("pass -> fail")."""

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Judged:
        return cls(
            text(data.get("name")) or "",
            text(data.get("variant")) or "",
            _or_zero(number(data.get("threshold"))),
            text(data.get("comparison")) or "",
            number(data.get("value")),
            flag(data.get("passed")),
            text(data.get("evidence")),
            text(data.get("verdict")) or "",
            text(data.get("detail")) or "",
            data.get("carried_over") is True,
            text(data.get("predicted")),
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for optional in ("carried_over", "predicted"):
            if not out[optional]:
                out.pop(optional)
        return out

    def lock_json(self) -> dict[str, Any]:
        """As the lock records it: nothing that depends on the machine that judged it."""
        out = asdict(self)
        out.pop("carried_over")
        out.pop("predicted")
        return out


def _or_zero(value: Number | None) -> Number:
    return 0 if value is None else value


def verdicts(data: object) -> list[Judged]:
    """The verdicts of a `verdicts` list as read from JSON; entries that are no object are left out."""
    if not isinstance(data, list):
        return []
    return [Judged.from_json(v) for v in data if isinstance(v, dict)]
