"""A measurement as the code reads it: the light, typed view of reconciler.records.measurement.

The pydantic model validates what is written (a lock, a `--json` output) and generates the schema;
this view is what every reader gets, built from parsed JSON without loading pydantic (a no-op plan
reads measurements and must start fast). Its fields are the model's, by name (a test checks it), so
a renamed field is a type error in every reader, not a silent None. A field of the wrong JSON type
reads as absent, as a missing one does: a hand-edited lock never crashes a reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Number = float | int


def number(value: object) -> Number | None:
    """A JSON number as read (an int stays an int); None for anything else, booleans included."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Measured:
    """One figure of a build and what it rests on (reconciler.records.measurement.Measurement)."""

    value: Number | None
    evidence: str
    detail: str | None = None
    record: str | None = None
    runner: str | None = None
    digest: str | None = None
    measure: str | None = None
    on_target: bool | None = None
    host: str | None = None
    assumed: str | None = None
    verdict: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Measured:
        return cls(
            number(data.get("value")),
            text(data.get("evidence")) or "",
            text(data.get("detail")),
            text(data.get("record")),
            text(data.get("runner")),
            text(data.get("digest")),
            text(data.get("measure")),
            flag(data.get("on_target")),
            text(data.get("host")),
            text(data.get("assumed")),
            text(data.get("verdict")),
        )


Measurements = Mapping[str, Measured]
"""Measurement name (`latency_ms.p90`, `accuracy`, `size_mb`, ...) -> what was measured."""


def measurements(data: object) -> dict[str, Measured]:
    """Name -> measurement of a `measurements` object as read from JSON; entries that are no object
    are left out (lock integrity reports them), as is anything when `data` is no object."""
    if not isinstance(data, dict):
        return {}
    return {str(name): Measured.from_json(m) for name, m in data.items() if isinstance(m, dict)}
