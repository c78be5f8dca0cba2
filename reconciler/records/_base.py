"""What every record shares: the closed and open base models, and the field types they reuse.

A record is dumped with the keys that were set and no others (`exclude_unset`): an optional field
that was never given stays absent, one given as null stays null. That is what keeps a lock file read
and written back byte-identical, and why optional fields are declared with `optional()` (absent from
the JSON rather than null, so the schema describes the value, not null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, WithJsonSchema
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema, core_schema

T = TypeVar("T")

Omittable: TypeAlias = T | SkipJsonSchema[None]
"""A field that is either present with a value of type T or absent (None in Python, never null in
JSON): declared `name: Omittable[str] = optional(...)`."""

Digest = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
"""A sha256 in lowercase hex: a stage key, a store object, a measurement's signature."""

Number = Annotated[float | int, WithJsonSchema({"type": "number"})]
"""A JSON number, kept as written: 0 stays 0 and 1.0 stays 1.0 (an int is never widened to float)."""

NonNegative = Annotated[float | int, Field(ge=0), WithJsonSchema({"type": "number", "minimum": 0})]

Count = Annotated[int, Field(ge=0)]


@dataclass(frozen=True)
class OneOf:
    """`Annotated[str, OneOf(words)]`: a string that is one of `words`, checked and published as an
    enum; for vocabularies defined as constants elsewhere (stage names, sync and health words), which a
    Literal would restate."""

    words: tuple[str, ...]
    description: str | None = None

    def _check(self, value: str) -> str:
        if value not in self.words:
            raise ValueError(f"{value!r} is not one of {', '.join(self.words)}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out: dict[str, Any] = {"enum": list(self.words)}
        if self.description:
            out["description"] = self.description
        return out


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def optional(description: str | None = None) -> Any:
    """The field spec of an Omittable field: default None, no `default` in the schema."""
    return Field(None, description=description, json_schema_extra=_no_default)


def described(description: str, **constraints: Any) -> Any:
    """The field spec of a required field with a description (and constraints, e.g. ge=0)."""
    return Field(description=description, **constraints)


class Record(BaseModel):
    """A closed record: an unknown key is an error, and the schema says so (additionalProperties)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    def dump(self) -> dict[str, Any]:
        """The record as JSON-ready Python: the keys that were set, nested records alike."""
        return self.model_dump(exclude_unset=True)


class OpenRecord(Record):
    """A record that may carry keys beyond those declared (kept as they are): the fields scripts read
    are pinned, others may be added (the contract: add freely, never rename)."""

    model_config = ConfigDict(extra="allow")
