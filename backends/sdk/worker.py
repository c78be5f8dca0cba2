"""How a stage runs a managed toolchain's worker script: one child process of the toolchain's venv per
call, a JSON request file in, a JSON result file out, the toolchain's whole output in the stage log.

A managed toolchain (backends.sdk.toolchains: coremltools, onnx2tf + LiteRT, rknn-toolkit2) pins packages
the main stack cannot import, so its work runs in a script under the venv's interpreter, by path and
isolated (backends.sdk.process). The script reads `<name>-request.json` and writes
`<name>-result.json` in the job folder (`<name>` is the script's package: "tflite", "coreml", "rknn"):
`{"ok": true, ...}` on success, `{"ok": false, "error": ..., "step": ...}` when the tool refused, and
meanwhile `{"running": ...}` before a step the tool may crash in, so that a crash names its step.

Every way the child can end becomes a stage error here, never an exception in the reconciler:
- a reported failure is a TerminalError (the same inputs fail again) with the log's last lines;
- a crash on its input (a signal such as SIGSEGV or SIGABRT, or exit status 134, an abort) is a
  TerminalError too, for the same reason;
- any other end without a result (killed from outside, out of memory) and a hang past the timeout
  are TransientErrors the engine retries.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.sdk import process
from backends.sdk.child_call import DETERMINISTIC_SIGNALS
from backends.sdk.errors import BackendError, TerminalError, TransientError

TAIL_LINES = 20
"""Log lines a failure message carries (what the tool printed last explains most failures)."""

ABORT_EXIT = 134
"""The exit status of a process that aborted (128 + SIGABRT), as some vendor runtimes report it."""

_ADDR_NO_RANDOMIZE = 0x0040000


def base_env(job: Path) -> dict[str, str]:
    """The fixed environment a worker starts from: no PYTHONPATH or user settings, HOME inside the job
    folder (tools write their caches and configs there), two OpenMP threads."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(job),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "2",
    }


def run_worker(
    python: Path,
    script: Path,
    request: Mapping[str, Any],
    job: Path,
    log: Path,
    *,
    tool: str,
    timeout_s: float,
    env: Mapping[str, str],
    reproducible: bool = False,
) -> dict[str, Any]:
    """Runs `script` under the venv interpreter `python` on `request` in the folder `job`; returns the
    worker's result (ok: true). `tool` names the toolchain in errors ("onnx2tf", "rknn-toolkit2").

    `reproducible`: for a tool whose output bytes depend on the process's memory layout (the RKNN
    toolkit embeds heap addresses), the script runs as a copy inside `job` by relative paths, with
    address-space randomisation off and `env` kept as given (a PYTHONHASHSEED in it reaches the tool).
    """
    name = script.parent.name
    job.mkdir(parents=True, exist_ok=True)
    req_path, res_path = job / f"{name}-request.json", job / f"{name}-result.json"
    req_path.write_text(json.dumps(request, indent=1, sort_keys=True))
    res_path.unlink(missing_ok=True)
    if reproducible:
        shutil.copyfile(script, job / script.name)
        argv = process.python_argv(
            script.name, req_path.name, res_path.name, interpreter=str(python), keep_env=True
        )
    else:
        argv = process.script_argv(script, str(req_path), str(res_path), interpreter=str(python))
    preexec = _no_aslr if reproducible else None
    done = process.run(argv, tool, timeout_s, cwd=job, env=env, log=log, preexec_fn=preexec)
    return _result(res_path, done.returncode, log, tool)


def _result(res_path: Path, rc: int, log: Path, tool: str) -> dict[str, Any]:
    result: dict[str, Any] | None = None
    try:
        result = json.loads(res_path.read_text())
    except (OSError, ValueError):
        result = None
    if isinstance(result, dict) and result.get("ok") is True and rc == 0:
        return result
    if isinstance(result, dict) and result.get("ok") is False:
        step = result.get("step")
        what = f"{tool} {step} failed" if step else tool
        raise TerminalError(f"{what}: {result.get('error', 'failed')}\n{log_tail(log)}".rstrip())
    during = result.get("running") if isinstance(result, dict) else None
    raise crash_error(tool, rc, log, during=str(during) if during else None)


def crash_error(tool: str, rc: int, log: Path, during: str | None = None) -> BackendError:
    """The error for a worker that ended without a result: terminal when it crashed on its input.
    `during`: the step the worker said it was running (a `{"running": ...}` result file written before
    a step a toolchain may crash in), named in the message: a vendor library's SIGSEGV says nothing of
    where it was."""
    if rc < 0:
        try:
            sig = signal.Signals(-rc)
        except ValueError:
            deterministic, how = False, f"killed by signal {-rc}"
        else:
            deterministic = sig in DETERMINISTIC_SIGNALS
            how = f"aborted ({sig.name})" if deterministic else f"killed by {sig.name}"
    elif rc == ABORT_EXIT:
        deterministic, how = True, f"exited with {rc} (abort)"
    else:
        deterministic, how = False, f"exited with {rc} without a result"
    where = f" during {during}" if during else ""
    message = f"{tool} {how}{where}; last log lines:\n{log_tail(log)}"
    return TerminalError(message) if deterministic else TransientError(message)


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The log's last non-blank lines (carriage-return progress bars split into lines)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _no_aslr() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL(None).personality(_ADDR_NO_RANDOMIZE)
    except (OSError, AttributeError):
        pass
