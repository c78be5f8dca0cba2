"""Pydantic validation errors, rewritten as `file:line:col: field.path: message`.

Pydantic reports a location as a tuple of keys; the flattened YAML document maps each such path to
the node it came from. A missing key points at its parent mapping, an unknown key at the key itself,
and a model-level rule (e.g. "ptq needs calibration") at the key of the section it concerns.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from reconciler.spec import models
from reconciler.spec._errors import SpecError
from reconciler.spec._suggest import allowed_keys, did_you_mean, literal_values, suggest
from reconciler.spec._yaml import Flat, Loc, Map, Mark, Scalar, describe, dotted

_PATTERNS = {
    models._NAME: "must be 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a "
    "letter or digit",
    models._SHA256: "must be a sha256: 64 lower-case hex digits",
    models._RUNNER: "must be local, ssh://user@host[:port] or adb://serial",
}
_TYPES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def from_validation_error(exc: ValidationError, flat: Flat) -> list[SpecError]:
    """One SpecError per pydantic error, positioned in the YAML document."""
    out: list[SpecError] = []
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err["loc"])
        mark = _mark(err["type"], loc, flat)
        out.append(SpecError(mark.file, mark.line, mark.column, dotted(loc), _message(err, loc, flat)))
    return out


def _mark(kind: str, loc: Loc, flat: Flat) -> Mark:
    if kind == "missing":
        return flat.nearest(loc[:-1], prefer_key=True)[0]
    if kind == "extra_forbidden":
        return flat.nearest(loc, prefer_key=True)[0]
    prefer_key = isinstance(flat.nodes.get(loc), Map) and kind in ("value_error", "assertion_error")
    return flat.nearest(loc, prefer_key=prefer_key)[0]


def _message(err: Any, loc: Loc, flat: Flat) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = allowed_keys(loc[:-1])
        return f"unknown key {key!r}{suggest(key, allowed, 'allowed keys', limit=30)}"
    if kind == "literal_error":
        values = literal_values(loc)
        hint = did_you_mean(str(value), values) if isinstance(value, str) else ""
        return f"must be one of {', '.join(values)}; got {describe(value)}{hint}"
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {_BOUNDS[kind]} {bound}, got {describe(value)}"
    if kind in ("too_short", "too_long"):
        return _length_message(kind, ctx)
    if kind in _TYPES:
        message = _type_message(kind, value, flat.nodes.get(loc))
        if kind == "int_type" and _is_dimension(loc) and (value is None or isinstance(value, str)):
            message += "; a dynamic dimension must be given a fixed size here"
        return message
    if kind == "string_pattern_mismatch":
        rule = _PATTERNS.get(ctx.get("pattern", ""), f"must match {ctx.get('pattern')}")
        return f"{rule}; got {describe(value)}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return str(err["msg"])


def _is_dimension(loc: Loc) -> bool:
    return loc[:2] in (("spec", "inputs"), ("spec", "shape_variants")) and isinstance(loc[-1], int)


def _length_message(kind: str, ctx: dict[str, Any]) -> str:
    one, many = ("entry", "entries") if ctx.get("field_type") == "Dictionary" else ("item", "items")
    bound, word = (ctx.get("min_length"), "least") if kind == "too_short" else (ctx.get("max_length"), "most")
    return f"must have at {word} {bound} {one if bound == 1 else many}, got {ctx.get('actual_length')}"


def _type_message(kind: str, value: Any, node: Any) -> str:
    message = f"{_TYPES[kind]}, got {describe(value)}"
    if kind == "string_type" and isinstance(node, Scalar) and node.plain and value is not None:
        message += f'; quote it: "{node.text}"'
    return message
