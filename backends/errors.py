"""The errors a backend may raise; toolchain exceptions are translated into these at the adapter boundary.

BackendError
├── TerminalError        the inputs are wrong; retrying cannot help (an op with no fallback, a corrupt model)
│   └── UnsupportedStage the spec asks for work no backend implements for this target
├── TransientError       may succeed on retry (runner timeout, dropped connection, toolchain crash)
└── ToolchainMissing     the toolchain is not installed; the stage is "not run", never passed
"""

from __future__ import annotations


class BackendError(Exception):
    """Base of every error a stage may raise. `str(err)` is one line for the user."""


class TerminalError(BackendError):
    pass


class UnsupportedStage(TerminalError):
    pass


class TransientError(BackendError):
    pass


class ToolchainMissing(BackendError):
    pass


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception message, bounded: errors reach the user as one line."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
