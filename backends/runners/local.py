"""The local runner: benchprog in a subprocess of the same interpreter, with a timeout.

benchprog runs by file path in isolated mode (backends.sdk.process): the job folder, the repository and
PYTHONPATH are never on its import path; the shared harness is found through the installed npuctl or,
failing that, beside benchprog's own file.

A subprocess, not a call, so a runtime that crashes or hangs fails one measurement (a TransientError
the engine retries) instead of taking the reconciler down, and so memory is measured in a process
that holds nothing but the runtime and the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.runners import REQUEST_FILE, parse_result
from backends.sdk import process
from backends.sdk.errors import TransientError

BENCHPROG = Path(__file__).resolve().with_name("benchprog.py")


class LocalRunner:
    name = "local"
    evidence = "measured:host"

    def __init__(self, interpreter: str | None = None) -> None:
        self.interpreter = interpreter
        """Another Python (a managed toolchain venv whose runtime the main stack cannot import)."""

    def describe(self) -> str:
        return "local"

    def command(self, job_dir: Path) -> list[str]:
        return process.script_argv(BENCHPROG, str(job_dir / REQUEST_FILE), interpreter=self.interpreter)

    def run(self, job_dir: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        try:
            done = process.run(self.command(job_dir), "benchprog", timeout_s, cwd=job_dir)
        except process.TimedOut as exc:
            _append(log, exc.stderr)
            raise TransientError(f"{exc} on local") from None
        _append(log, done.stderr)
        return parse_result(done.stdout, done.stderr, done.returncode, "local")


def _append(log: Path | None, text: str) -> None:
    if log is not None and text:
        with log.open("a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
