"""Runs backends.qnn.worker in a child process: a crash of the QNN library is a failed stage, and the
library's native log (validation and placement lines) is captured to a file for the parser."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.sdk import process
from backends.sdk.errors import TerminalError, TransientError

TIMEOUT_S = 1800.0


def call(
    request: dict[str, Any],
    job: Path,
    native_log: Path,
    timeout_s: float = TIMEOUT_S,
    stop_at: str | None = None,
) -> dict[str, Any]:
    """The worker's JSON answer; its native stderr goes to `native_log`. `stop_at`: a line of that log
    after which the caller needs nothing more from the child: once it is written the child is stopped
    and the answer is {"ok": true, "stopped_at": stop_at} with the library's version."""
    path = job / f"qnn-{request['mode']}.json"
    path.write_text(json.dumps(request, sort_keys=True))
    argv = process.python_argv("-m", "backends.qnn.worker", str(path))
    native_log.write_text("")
    what = f"onnxruntime-qnn {request['mode']}"
    until = None if stop_at is None else _written(native_log, stop_at)
    proc = process.run(argv, what, timeout_s, cwd=job, log=native_log, stdout_to_log=False, until=until)
    if proc.returncode == process.STOPPED:
        from importlib.metadata import version

        return {"ok": True, "stopped_at": stop_at, "onnxruntime_qnn": version("onnxruntime-qnn")}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    answer: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode == 0 and answer.get("ok"):
        return answer
    if answer.get("error"):
        raise TerminalError(f"onnxruntime-qnn {request['mode']}: {answer['error']}")
    raise TransientError(
        f"onnxruntime-qnn {request['mode']} crashed (exit {proc.returncode}); native log {native_log}"
    )


def _written(log: Path, marker: str) -> Callable[[], bool]:
    """True once `marker` is in `log` (each look reads on from where the last one ended)."""
    want = marker.encode()
    offset, tail = 0, b""

    def found() -> bool:
        nonlocal offset, tail
        with log.open("rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
        offset += len(chunk)
        text, tail = tail + chunk, (tail + chunk)[-len(want) :]
        return want in text

    return found
