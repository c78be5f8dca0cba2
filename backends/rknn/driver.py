"""Drives worker.py inside the managed RKNN venv: one subprocess per build, a JSON request in, a JSON
result file out, the toolkit's whole output in the stage log.

Every way the toolkit can fail becomes a stage error here, never an exception in the reconciler:
a reported failure (an API call returning -1) and an abort (rk2118 aborts the process with SIGABRT,
exit 134) are TerminalErrors carrying the log's last 20 lines (the same inputs abort again); a hang
past the timeout is a TransientError. Builds run with hash randomisation and address-space
randomisation off: the toolkit embeds heap addresses in the .rknn, and with both off the same inputs
give the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backends import outside_tmp, toolchains
from backends.child import python_argv
from backends.errors import TerminalError, ToolchainMissing, TransientError

WORKER = Path(__file__).with_name("worker.py")
TAIL_LINES = 20
_ADDR_NO_RANDOMIZE = 0x0040000


def worker_digest() -> str:
    import hashlib

    return hashlib.sha256(WORKER.read_bytes()).hexdigest()[:16]


def venv_python() -> Path:
    py = toolchains.python(toolchains.RKNN)
    if py is None:
        raise ToolchainMissing(
            f"rknn-toolkit2 {toolchains.RKNN.version} not installed: {toolchains.RKNN.install_hint}"
        )
    return py


def _no_aslr() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.personality(_ADDR_NO_RANDOMIZE)
    except (OSError, AttributeError):
        pass
    os.setsid()


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


_KEPT_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")


def worker_env(job_dir: Path) -> dict[str, str]:
    """A fixed, minimal environment: the toolkit's output depends on the process's memory layout,
    which depends on the environment's size, so the same inputs only give the same bytes when the
    environment is the same (machine-wide CPU workarounds are kept)."""
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env.setdefault("OMP_NUM_THREADS", "2")
    env.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(job_dir),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


@contextmanager
def job_folder() -> Iterator[Path]:
    """A scratch folder whose path has the same length on every run (see worker_env), outside the
    repository; backends.outside_tmp records it so `npuctl gc` removes it after a kill -9."""
    with outside_tmp.folder("npuctl-rknn-") as path:
        yield path / "job"


def run(
    request: dict[str, Any],
    job_dir: Path,
    log: Path,
    after: dict[str, Any] | None = None,
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Runs one worker request in `job_dir` (from job_folder()); `after` holds the actions on the built
    model (simulate, analysis). Returns the worker's result (ok: true)."""
    py = venv_python()
    job_dir.mkdir(parents=True, exist_ok=True)
    if after:
        (job_dir.parent / "rknn-after.json").write_text(json.dumps(after, indent=1, sort_keys=True))
    shutil.copyfile(WORKER, job_dir / WORKER.name)
    req_path = job_dir / "rknn-request.json"
    res_path = job_dir / "rknn-result.json"
    req_path.write_text(json.dumps(request, indent=1, sort_keys=True))
    res_path.unlink(missing_ok=True)
    # keep_env: PYTHONHASHSEED=0 (worker_env) must reach the toolkit; the fixed env has no PYTHONPATH
    argv = python_argv(WORKER.name, req_path.name, res_path.name, interpreter=str(py), keep_env=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ cd {job_dir} && {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            argv,
            cwd=job_dir,
            env=worker_env(job_dir),
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_no_aslr,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait()
            raise TransientError(f"rknn-toolkit2 timed out after {timeout_s:g} s") from None
    return _result(res_path, rc, log)


def _result(res_path: Path, rc: int, log: Path) -> dict[str, Any]:
    result: dict[str, Any] | None = None
    if res_path.exists():
        try:
            result = json.loads(res_path.read_text())
        except ValueError:
            result = None
    if result is not None and result.get("ok") is True and rc == 0:
        return result
    tail = log_tail(log)
    if result is not None and result.get("ok") is False:
        raise TerminalError(f"rknn-toolkit2 {result.get('step')} failed: {result.get('error')}\n{tail}")
    how = f"aborted (signal {-rc})" if rc < 0 else f"exited with {rc}" + (" (abort)" if rc == 134 else "")
    raise TerminalError(f"rknn-toolkit2 {how}; last log lines:\n{tail}")
