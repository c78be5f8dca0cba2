"""The rule registry and the evaluation entry point.

The first rule that decides a clause wins, so the order the families are tried in is stated here
(FAMILIES) rather than left to the order their modules happen to be imported in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING

from backends.passes.constraints._clauses import split_clauses
from backends.passes.constraints._view import FAILED, NOT_EVALUATED, OK, Context, NodeView, Verdict

if TYPE_CHECKING:
    import onnx

    from backends.catalog import OpSupport
    from backends.passes.facts import Facts


def evaluate(support: OpSupport, node: onnx.NodeProto, facts: Facts, ctx: Context) -> list[Verdict]:
    """Verdicts for every clause of the row's constraint text (empty text: no clause, no verdict)."""
    view = NodeView(node, facts, ctx)
    verdicts: list[Verdict] = []
    for clause in split_clauses(support.constraints or ""):
        verdicts.append(evaluate_clause(clause, view))
    return verdicts


def evaluate_clause(clause: str, view: NodeView) -> Verdict:
    low = " ".join(clause.lower().split())
    for pattern, fn in _rules():
        m = pattern.search(low)
        if m is None:
            continue
        try:
            result = fn(m, view)
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError):
            result = None
        if result is not None:
            status, detail = result
            return Verdict(status, clause, detail)
    return Verdict(NOT_EVALUATED, clause)


Result = tuple[str, str] | None
Rule = Callable[[re.Match[str], NodeView], Result]

FAMILIES = ("_notes", "_dtypes", "_shapes", "_attributes", "_ranges", "_inputs", "_conditional")
"""The rule modules in the order they are tried; within a module, rules are tried in source order."""
_RULES: dict[str, list[tuple[str, Rule]]] = {}


def rule(pattern: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        _RULES.setdefault(fn.__module__.rpartition(".")[2], []).append((pattern, fn))
        return fn

    return register


@cache
def _rules() -> tuple[tuple[re.Pattern[str], Rule], ...]:
    if set(_RULES) != set(FAMILIES):
        raise RuntimeError(f"rule modules {sorted(_RULES)} do not match FAMILIES {sorted(FAMILIES)}")
    return tuple((re.compile(p), fn) for family in FAMILIES for p, fn in _RULES[family])


def _check(ok: bool, good: str, bad: str) -> tuple[str, str]:
    return (OK, good) if ok else (FAILED, bad)


def summarize(verdicts: Sequence[Verdict]) -> tuple[list[str], list[str]]:
    """(failed texts, not-evaluated texts) of a verdict list."""
    failed = [v.text() for v in verdicts if v.status == FAILED]
    unknown = [v.clause for v in verdicts if v.status == NOT_EVALUATED]
    return failed, unknown
