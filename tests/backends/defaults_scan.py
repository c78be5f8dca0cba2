"""Finding defaults written as literals: where a module restates a value instead of reading its definition."""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_literal(node: ast.AST | None) -> bool:
    """A constant that means a value: not None, not `...` (required), not an empty container."""
    if isinstance(node, ast.Constant):
        return node.value is not None and node.value is not Ellipsis
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_literal(node.operand)
    return False


def _is_get(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"


def _defaults(scope: ast.AST) -> Iterator[ast.expr]:
    """The nodes written as a default inside `scope`: `Field(default=X)`, `m.get(key, X)`,
    `m.get(key) or X`, and a class field's `name: type = X`."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Call):
            yield from (k.value for k in node.keywords if k.arg == "default")
            if _is_get(node) and len(node.args) == 2:
                yield node.args[1]
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and _is_get(node.values[0]):
            yield node.values[-1]
        elif isinstance(node, ast.ClassDef):
            yield from (s.value for s in node.body if isinstance(s, ast.AnnAssign) and s.value is not None)


def literal_defaults(source: str, scopes: Collection[str]) -> list[tuple[str, int, object]]:
    """(scope, line, value) of each literal default inside the top-level classes and functions named
    `scopes` of `source`."""
    out = []
    for top in ast.parse(source).body:
        if isinstance(top, ast.ClassDef | ast.FunctionDef) and top.name in scopes:
            for node in _defaults(top):
                if _is_literal(node):
                    out.append((top.name, node.lineno, ast.literal_eval(node)))
    return sorted(out, key=lambda found: found[1])


def in_file(relative: str, scopes: Collection[str]) -> list[tuple[str, int, object]]:
    return literal_defaults((ROOT / relative).read_text(encoding="utf-8"), scopes)
