"""One bounded call of a transport client (ssh, scp, adb): the whole process group is killed on timeout,
and a timeout is a TransientError the engine retries."""

from __future__ import annotations

import os
import signal
import subprocess

from backends.errors import TransientError


def call(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    """Runs `argv`; `what` names the step in the timeout message ("benchprog on ssh://...")."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.communicate()
        raise TransientError(f"{what} timed out after {timeout_s:g} s") from None
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
