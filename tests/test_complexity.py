"""No function in reconciler/ or backends/ is more complex than LIMIT, by radon's cyclomatic complexity.

Radon counts each boolean operand and comprehension as a branch; ruff's C901 (pyproject) bounds the same
functions without them, so it misses a function whose branching hides in its conditions. Both run: ruff
on every edit, this bound in the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.visitors import ComplexityVisitor, Function

LIMIT = 30
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reconciler", "backends")


def _functions(source: str) -> Iterator[Function]:
    """Every function and method in `source`, closures included (each counted on its own)."""
    visitor = ComplexityVisitor.from_code(source)
    todo = [*visitor.functions, *(m for c in visitor.classes for m in c.methods)]
    while todo:
        function = todo.pop()
        yield function
        todo.extend(function.closures)


def over_limit(source: str, limit: int = LIMIT) -> list[str]:
    return [f"{f.lineno} {f.fullname} {f.complexity}" for f in _functions(source) if f.complexity > limit]


def test_the_bound_catches_a_function_over_it() -> None:
    branches = "".join(f"    if a == {i} and b:\n        return {i}\n" for i in range(16))
    source = f"def f(a, b):\n{branches}    return 0\n"
    assert over_limit(source) == ["1 f 33"]
    assert over_limit(source, limit=33) == []


def test_no_function_is_more_complex_than_the_limit() -> None:
    over = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in over_limit(path.read_text(encoding="utf-8"))
    ]
    assert over == [], f"split these into functions that each do one thing (limit {LIMIT}): {over}"
