"""Spec errors: every problem names a file, a 1-based line and column, a field path and a message.

Errors are values, collected and reported all at once; `SpecErrors` only carries them across a call
boundary. A line of 0 means the problem concerns the whole file (too large, unreadable, not found) and
is rendered `file: message`; an empty field (YAML syntax errors) is rendered `file:line:col: message`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def printable(text: str) -> str:
    """Control characters (a newline or NUL inside a hostile path) escaped: an error stays one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


@dataclass(frozen=True)
class SpecError:
    """One problem in one file, at one place."""

    file: Path
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = printable(display_path(self.file))
        if self.line > 0:
            where += f":{self.line}:{self.column}"
        message = printable(self.message)
        return f"{where}: {printable(self.field)}: {message}" if self.field else f"{where}: {message}"

    def to_json(self) -> dict[str, object]:
        return {
            "file": display_path(self.file),
            "line": self.line,
            "column": self.column,
            "field": self.field,
            "message": printable(self.message),
        }

    def sort_key(self) -> tuple[str, int, int, str]:
        return (str(self.file), self.line, self.column, self.field)


class SpecErrors(Exception):
    """One or more spec errors, raised together so that none hides another."""

    def __init__(self, errors: Iterable[SpecError]) -> None:
        self.errors: list[SpecError] = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))
