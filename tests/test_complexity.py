"""No function in reconciler/ or backends/ is more complex than LIMIT, counted with its conditions.

The count is radon's cyclomatic complexity: one, plus each `if`, `elif` and conditional expression, each
loop (and its `else`), each `except` handler and `try ... else`, each boolean operand after the first,
each comprehension and each of its conditions, each `assert`, and each `case` but a final wildcard. A
nested function is a function of its own, not part of the one around it. Ruff's C901 (pyproject) bounds
the same branches without the boolean operands and comprehensions, so it misses a function whose
branching hides in its conditions; this bound does not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

LIMIT = 30
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reconciler", "backends")

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _branches(node: ast.AST) -> int:
    if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
        return 1
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.Try):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        last = node.cases[-1].pattern
        return len(node.cases) - (isinstance(last, ast.MatchAs) and last.pattern is None)
    return 0


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """1 + the branches of the function's body, not counting the functions defined inside it."""
    total, todo = 1, list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, _FUNCTIONS):
            continue
        total += _branches(node)
        todo.extend(ast.iter_child_nodes(node))
    return total


def functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method in `tree`, nested ones too, with its qualified name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _FUNCTIONS):
            yield f"{prefix}{node.name}", node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def _only(source: str) -> int:
    ((_, function),) = [(n, f) for n, f in functions(ast.parse(source)) if n == "f"]
    return complexity(function)


def test_the_count_includes_conditions_and_comprehensions_and_leaves_out_nested_functions() -> None:
    assert _only("def f(a):\n    return a\n") == 1
    # if + `and` + comprehension + its condition
    assert _only("def f(a, b):\n    if a and b:\n        return [x for x in a if x]\n    return 0\n") == 5
    # for with else, two handlers, a conditional expression, one boolean operand more than one
    source = (
        "def f(a):\n"
        "    for x in a:\n        pass\n    else:\n        pass\n"
        "    try:\n        pass\n    except ValueError:\n        pass\n    except KeyError:\n        pass\n"
        "    return 1 if a or a or a else 2\n"
    )
    assert _only(source) == 1 + 2 + 2 + 1 + 2
    # the inner function's branches are its own
    nested = "def f(a):\n    def g(b):\n        if b:\n            return 1\n        return 2\n    return g\n"
    assert _only(nested) == 1
    assert dict((n, complexity(f)) for n, f in functions(ast.parse(nested)))["f.g"] == 2
    # match: each case but the final wildcard
    assert (
        _only(
            "def f(a):\n    match a:\n        case 1:\n            pass\n        case _:\n            pass\n"
        )
        == 2
    )


def test_no_function_is_more_complex_than_the_limit() -> None:
    over = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, function in functions(ast.parse(path.read_text(encoding="utf-8"))):
                count = complexity(function)
                if count > LIMIT:
                    over.append(f"{path.relative_to(ROOT)}:{function.lineno} {name} {count}")
    assert over == [], f"split these into functions that each do one thing (limit {LIMIT}): {over}"
