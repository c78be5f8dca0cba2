"""A long-lived spec worker: `python -I -m reconciler.engine.spec_worker --serve` fed one job at a time.

Only the standard library is used here, so the Ray executor can ship this module by value to its
workers (nothing is imported from a Ray worker's sys.path for it). One interpreter serves many
specs: its imports and its stage child interpreter are paid for once, not once per spec. A worker
that dies (killed, out of memory) fails the spec it was running and is started again for the next.
"""

from __future__ import annotations

import struct
import subprocess
import tempfile
from typing import IO

HEADER = struct.Struct(">Q")


class WorkerFailed(RuntimeError):
    """The worker died without an answer: that spec's error."""


class WorkerProcess:
    def __init__(self, argv: list[str], cwd: str) -> None:
        self.argv = argv
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: IO[bytes] | None = None

    def start(self) -> None:
        """Starts the interpreter now, so that its start-up and imports overlap the caller's own work
        instead of delaying the first job."""
        self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
            self.proc = subprocess.Popen(
                [*self.argv, "-m", "reconciler.engine.spec_worker", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                cwd=self.cwd,
            )
        return self.proc

    def _tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def run(self, job_json: str) -> bytes:
        """The pickled outcome of one job."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(job_json.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.read(HEADER.size)
            if len(header) != HEADER.size:
                raise EOFError
            (size,) = HEADER.unpack(header)
            payload = proc.stdout.read(size)
            if len(payload) != size:
                raise EOFError
            return payload
        except (OSError, EOFError):
            code = proc.wait()
            self.proc = None
            raise WorkerFailed(f"spec worker exited with {code}: {self._tail()}") from None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
