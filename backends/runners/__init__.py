"""Runners: where evaluate's benchmark runs. Every runner executes the same program (benchprog.py)
on a job folder, so host and device measurements are taken the same way.

A job folder holds `request.json` and the files it names (the artifact, samples.npz). A runner makes
the folder available where it runs (locally: as is; ssh/adb: pushed), runs
`python -m backends.runners.benchprog request.json` there (or `python benchprog.py request.json` with
harness.py beside it), brings back the outputs file the request names, and returns the parsed JSON
result. Errors are mapped the same way for every runner by `parse_result`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from backends.sdk.errors import TerminalError, TransientError

REQUEST_FILE = "request.json"


@runtime_checkable
class Runner(Protocol):
    name: str
    evidence: str
    """"measured:host" for the local runner, "measured:device" for ssh/adb."""

    def describe(self) -> str:
        """Where it runs, for measurement details ("local", "ssh://pi@board")."""
        ...

    def run(self, job_dir: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        """Runs benchprog on `job_dir/request.json`; returns its JSON result (with "ok": true).

        TransientError: timeout, crash, lost connection. TerminalError: benchprog rejected the request
        or the model, or printed something that is not its JSON result.
        """
        ...


def bench_files() -> list[Path]:
    """The files a remote runner copies into one folder on the device."""
    here = Path(__file__).resolve().parent
    bench = ("benchprog.py", "bench_common.py", "bench_io.py", "bench_ort.py", "bench_runtimes.py")
    return [*(here / name for name in bench), here.parent / "sdk" / "harness.py"]


def write_request(job_dir: Path, request: dict[str, Any]) -> Path:
    path = job_dir / REQUEST_FILE
    path.write_text(json.dumps(request, indent=1, sort_keys=True))
    return path


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-1500:]


def parse_result(stdout: str, stderr: str, returncode: int, where: str) -> dict[str, Any]:
    """benchprog's result from its stdout, or the error it stands for."""
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    result: Any = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = None
    if isinstance(result, dict) and "ok" in result:
        if result["ok"] is True and returncode == 0:
            return result
        if result["ok"] is False:
            message = f"benchprog on {where}: {result.get('error', 'failed')}"
            if result.get("kind") == "transient":
                raise TransientError(message)
            raise TerminalError(message)
    if returncode != 0:
        how = f"killed by signal {-returncode}" if returncode < 0 else f"exit {returncode}"
        raise TransientError(f"benchprog crashed on {where} ({how}): {_tail(stderr) or 'no stderr'}")
    raise TerminalError(f"benchprog on {where} printed no JSON result: {_tail(stdout, 3) or 'empty output'}")


def runner_for(spec: str) -> Runner:
    """The runner for `evaluate.runner`: local, ssh://user@host[:port] or adb://serial."""
    if spec == "local":
        from backends.runners.local import LocalRunner

        return LocalRunner()
    if spec.startswith("ssh://"):
        from backends.runners.ssh import SshRunner

        return SshRunner.from_url(spec)
    if spec.startswith("adb://"):
        from backends.runners.adb import AdbRunner

        return AdbRunner.from_url(spec)
    raise TerminalError(f"unknown evaluate.runner {spec!r} (local, ssh://user@host[:port], adb://serial)")


def key_identity(spec: str) -> dict[str, str]:
    """What besides `evaluate.runner` decides where a remote runner measures (its interpreter, its
    ssh options): it enters evaluate's key, so changing the device's python re-measures. {} locally,
    where the interpreter is this one and already in the fingerprint."""
    try:
        runner = runner_for(spec)
    except TerminalError:
        return {}
    out = {}
    python = getattr(runner, "python", None)
    if spec != "local" and python:
        out["python"] = str(python)
    options = getattr(runner, "options", None)
    if options:
        out["options"] = " ".join(map(str, options))
    return out
