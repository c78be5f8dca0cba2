"""Runs backends.qnn.worker in a child process: a crash of the QNN library is a failed stage, and the
library's native log (validation and placement lines) is captured to a file for the parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backends.sdk import process
from backends.sdk.errors import TerminalError, TransientError

TIMEOUT_S = 1800.0


def call(
    request: dict[str, Any], job: Path, native_log: Path, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    """The worker's JSON answer; its native stderr goes to `native_log`."""
    path = job / f"qnn-{request['mode']}.json"
    path.write_text(json.dumps(request, sort_keys=True))
    argv = process.python_argv("-m", "backends.qnn.worker", str(path))
    native_log.write_text("")
    what = f"onnxruntime-qnn {request['mode']}"
    proc = process.run(argv, what, timeout_s, cwd=job, log=native_log, stdout_to_log=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    answer: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode == 0 and answer.get("ok"):
        return answer
    if answer.get("error"):
        raise TerminalError(f"onnxruntime-qnn {request['mode']}: {answer['error']}")
    raise TransientError(
        f"onnxruntime-qnn {request['mode']} crashed (exit {proc.returncode}); native log {native_log}"
    )
