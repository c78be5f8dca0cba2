"""Runs backends.qnn.worker in a child process: a crash of the QNN library is a failed stage, and the
library's native log (validation and placement lines) is captured to a file for the parser."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from backends.child import python_argv
from backends.errors import TerminalError, TransientError

TIMEOUT_S = 1800.0


def call(
    request: dict[str, Any], job: Path, native_log: Path, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    """The worker's JSON answer; its native stderr goes to `native_log`."""
    path = job / f"qnn-{request['mode']}.json"
    path.write_text(json.dumps(request, sort_keys=True))
    argv = python_argv("-m", "backends.qnn.worker", str(path))
    try:
        with native_log.open("w") as err:
            proc = subprocess.run(
                argv, cwd=job, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout_s, check=False
            )
    except subprocess.TimeoutExpired as exc:
        raise TransientError(f"onnxruntime-qnn {request['mode']} timed out after {timeout_s:g} s") from exc
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    answer: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode == 0 and answer.get("ok"):
        return answer
    if answer.get("error"):
        raise TerminalError(f"onnxruntime-qnn {request['mode']}: {answer['error']}")
    raise TransientError(
        f"onnxruntime-qnn {request['mode']} crashed (exit {proc.returncode}); native log {native_log}"
    )
