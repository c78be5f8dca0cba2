"""Running apply for a spec in a subprocess that a newer change can cancel.

A subprocess (rather than a thread) because only a process can be stopped at any point: cancelling sends
SIGINT to its process group (the engine cleans its work folder and releases its locks), then SIGKILL
after a grace period. Either way the engine's crash safety holds: artifacts are stored before the record
naming them, so a killed apply leaves no record for the stage it was running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from backends.sdk.process import python_argv
from reconciler.engine.results import SpecResult
from reconciler.repo import Layout
from reconciler.state import scratch

CANCEL_GRACE_S = 2.0
"""How long a cancelled apply gets to unwind after SIGINT (~0.2 s alone) before SIGKILL."""


@dataclass(frozen=True)
class JobResult:
    returncode: int
    payload: dict[str, Any] | None
    """The `apply --json` document, when the run got far enough to print it."""
    stderr: str
    cancelled: bool = False

    def spec(self, spec_file: Path) -> SpecResult | None:
        """This spec's entry of the payload (matched by file), read back as apply wrote it; None when
        there is none or it is not a spec result (an npuctl of another version)."""
        for entry in (self.payload or {}).get("specs") or []:
            try:
                if Path(entry.get("file", "")).resolve() == spec_file:
                    return SpecResult.from_json(entry)
            except (OSError, TypeError, KeyError):
                continue
        return None

    def last_error_line(self) -> str:
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit {self.returncode}"


class Job(Protocol):
    spec_file: Path

    def poll(self) -> JobResult | None:
        """The result once finished, else None; never blocks."""
        ...

    def cancel(self) -> None:
        """Stop the run now (blocks for at most a grace period)."""
        ...


class Runner(Protocol):
    def start(self, spec_file: Path) -> Job: ...


class SubprocessJob:
    def __init__(self, spec_file: Path, command: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.spec_file = spec_file
        self.cwd = cwd
        # files, not pipes: a child writing more than a pipe holds would block until read
        self._out: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the job
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [*command, str(spec_file)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            start_new_session=True,
        )
        self._result: JobResult | None = None

    def _read(self, handle: IO[bytes]) -> str:
        handle.seek(0)
        text = handle.read().decode("utf-8", errors="replace")
        handle.close()
        return text

    def _finish(self, returncode: int, cancelled: bool) -> JobResult:
        stdout, stderr = self._read(self._out), self._read(self._err)
        try:
            payload = json.loads(stdout) if stdout.strip() else None
        except ValueError:
            payload = None
        self._result = JobResult(
            returncode, payload if isinstance(payload, dict) else None, stderr, cancelled
        )
        return self._result

    def poll(self) -> JobResult | None:
        if self._result is not None:
            return self._result
        code = self.process.poll()
        return None if code is None else self._finish(code, False)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def cancel(self) -> None:
        if self._result is not None:
            return
        self._signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=CANCEL_GRACE_S)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            code = self.process.wait()
            # killed, it cleaned nothing: its work folders go here (in full test runs an apply has
            # missed a 10 s grace, its SIGINT apparently not acted on; the cause was not isolated)
            scratch.remove_of(Layout(self.cwd).tmp, self.process.pid)
        self._finish(code, True)


class SubprocessRunner:
    """`python -I -m reconciler apply --json SPEC`, in the repository root; `command` replaces the prefix.

    Isolated (backends.sdk.process): the repository is the child's working directory (apply finds the root
    from it) but never on its import path, so a `reconciler/` folder in it cannot replace npuctl.
    """

    def __init__(
        self, root: Path, command: Sequence[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.command = list(command or python_argv("-m", "reconciler", "apply", "--json"))
        self.env = {**os.environ, "NPUCTL_WATCH_CHILD": "1", **(env or {})}

    def start(self, spec_file: Path) -> SubprocessJob:
        return SubprocessJob(spec_file, self.command, self.root, self.env)
