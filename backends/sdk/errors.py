"""The errors a backend may raise; toolchain exceptions are translated into these at the adapter boundary.

BackendError
├── TerminalError        the inputs are wrong; retrying cannot help (an op with no fallback, a corrupt model)
│   └── UnsupportedStage the spec asks for work no backend implements for this target
├── TransientError       may succeed on retry (runner timeout, dropped connection, toolchain crash)
└── ToolchainMissing     the toolchain is not installed; the stage is "not run", never passed
"""

from __future__ import annotations

import re


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
    """The line of an exception's message that says what went wrong (`summary`), bounded: errors reach
    the user as one line, and a toolchain's first lines often only say where (OpenVINO opens with
    "Exception from src/inference/src/cpp/core.cpp:117:" lines before the failed check)."""
    return summary(str(exc), limit) or type(exc).__name__


_LOCATION = re.compile(r"^(Exception from \S+:\d+:?|Traceback \(most recent call last\):|[\^~ ]+)$")
"""Lines that say where, not what: a C++ source location (OpenVINO), a traceback header, carets."""


def summary(text: str, limit: int = 300) -> str:
    """The one line of a toolchain's message that says what went wrong: after a Python traceback, the
    exception it ended in (its lines joined); otherwise the first line that is not a source location,
    with the line after it when it ends in a colon. The whole text belongs in the stage log; this is
    what the user reads beside it."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if frames and "Traceback (most recent call last):" in text:
        after = lines[frames[-1] + 1 :]
        while after and after[0].startswith(" "):  # the frame's code line and its carets
            after.pop(0)
        ending = [line.strip() for line in after if not _LOCATION.match(line.strip())][-4:]
        head = lines[0].split("Traceback (most recent call last):")[0].strip()
        body = " ".join(ending) or lines[-1].strip()
        line = f"{head} {body}" if head else body
    else:
        said = [x.strip() for x in lines if not _LOCATION.match(x.strip())] or [lines[0].strip()]
        line = f"{said[0]} {said[1]}" if said[0].endswith(":") and len(said) > 1 else said[0]
    line = re.sub(r"Exception from \S+:\d+:\s*", "", line).strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."
