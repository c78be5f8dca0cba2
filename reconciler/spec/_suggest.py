"""Did-you-mean suggestions, and what the spec models allow at a given field path.

Suggestions are computed from the pydantic models themselves, so a field added to the models is
suggested without touching this module.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

from reconciler.spec._yaml import Loc

if TYPE_CHECKING:
    from pydantic import BaseModel


def close(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Candidates that look like `word` (difflib), best first; a case-only difference ranks first."""
    pool = list(dict.fromkeys(candidates))
    exact_case = [c for c in pool if c.lower() == word.lower() and c != word]
    similar = difflib.get_close_matches(word, pool, n=n, cutoff=0.6)
    return list(dict.fromkeys(exact_case + similar))[:n]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """'; did you mean 'x'?' or '; did you mean 'x' or 'y'?', or '' when nothing is close."""
    hits = close(word, candidates)
    if not hits:
        return ""
    quoted = [repr(h) for h in hits]
    options = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"; did you mean {options}?"


def suggest(word: str, candidates: Sequence[str], what: str, limit: int = 12) -> str:
    """A did-you-mean hint when something is close, else '; <what>: a, b, c'."""
    hint = did_you_mean(word, candidates)
    if hint or not candidates:
        return hint
    return f"; {what}: {listing(candidates, limit)}"


def listing(values: Sequence[str], limit: int = 12) -> str:
    """'a, b, c' (at most `limit`, then '... (N more)')."""
    shown = ", ".join(values[:limit])
    return shown if len(values) <= limit else f"{shown}, ... ({len(values) - limit} more)"


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional around a type."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _model_field(model: type[BaseModel], key: str | int) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def type_at(loc: Loc) -> Any:
    """The (unwrapped) type the models declare at `loc`, or None when the path leaves the models."""
    from pydantic import BaseModel

    from reconciler.spec.models import Deployment

    tp: Any = Deployment
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            tp = _model_field(tp, part)
        elif origin is list:
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
        if tp is None:
            return None
    return _unwrap(tp)


def allowed_keys(loc: Loc) -> list[str]:
    """The keys the mapping at `loc` accepts (aliases as written in YAML); [] for free-form maps."""
    from pydantic import BaseModel

    tp = type_at(loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [info.alias or name for name, info in tp.model_fields.items()]
    return []


def literal_values(loc: Loc) -> list[str]:
    """The allowed values when the field at `loc` is an enumeration, else []."""
    tp = type_at(loc)
    if typing.get_origin(tp) is Literal:
        return [str(v) for v in typing.get_args(tp)]
    return []
