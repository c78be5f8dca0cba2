"""The local runner: benchprog in a subprocess of the same interpreter, with a timeout.

benchprog runs by file path in isolated mode (backends.child): the job folder, the repository and
PYTHONPATH are never on its import path; the shared harness is found through the installed npuctl or,
failing that, beside benchprog's own file.

A subprocess, not a call, so a runtime that crashes or hangs fails one measurement (a TransientError
the engine retries) instead of taking the reconciler down, and so memory is measured in a process
that holds nothing but the runtime and the model.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from backends.child import script_argv
from backends.errors import TransientError
from backends.runners import REQUEST_FILE, parse_result

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
        return script_argv(BENCHPROG, str(job_dir / REQUEST_FILE), interpreter=self.interpreter)

    def run(self, job_dir: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        proc = subprocess.Popen(
            self.command(job_dir),
            cwd=job_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            _append(log, stderr)
            raise TransientError(f"benchprog timed out after {timeout_s:g} s on local") from None
        _append(log, stderr)
        return parse_result(stdout, stderr, proc.returncode, "local")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kills the benchprog process group this runner started (its own session), nothing else."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _append(log: Path | None, text: str) -> None:
    if log is not None and text:
        with log.open("a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
