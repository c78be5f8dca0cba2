"""Calling a named function in a child Python process, so a toolchain that crashes the interpreter
(a segfault in ONNX Runtime, an abort in a vendor compiler) fails one call, not the reconciler.

One child serves many calls (JSON lines over its stdin/stdout; bulk data goes through files the call
names), so ONNX Runtime, onnx and numpy are imported once per run, not once per call. Each call carries
the caller's environment and working folder, and the child's stdout/stderr (Python's and native code's)
go to the call's log file. When the child dies, the call raises the error its end stands for, with the
signal named ("onnxruntime child killed by SIGSEGV"), and the next call starts a fresh child.

The child is started with `backends.sdk.process.python_argv` (isolated: the repository is never on its
import path) and dies with its parent (PR_SET_PDEATHSIG on Linux).

Test-only hook: with NPUCTL_TEST_ONLY_SIGSEGV set, a child whose call's log path contains that text
kills itself with a real SIGSEGV before running the function. Only the environment of the process
running npuctl can set it; nothing in a spec or a repository reaches it.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any

from backends.sdk.errors import BackendError, TerminalError, ToolchainMissing, TransientError
from backends.sdk.process import die_with_parent

TEST_ONLY_SIGSEGV = "NPUCTL_TEST_ONLY_SIGSEGV"

DETERMINISTIC_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
)
"""A child killed by one of these crashed on its input: retrying the same input crashes again."""


class ChildKilled(TerminalError):
    """The child died of a signal that retrying the same input would raise again."""


class ChildHung(TerminalError):
    """The child did not answer within the call's time limit and was killed: the same input would
    hang it again."""


class ChildLost(TransientError):
    """The child ended without answering (killed from outside, out of memory, exited)."""


class Unloadable(Exception):
    """The child cannot import the function it was asked to run (a module only the parent can see)."""


def crash_error(who: str, returncode: int | None) -> BackendError:
    """The error for a child that ended without answering."""
    if returncode is not None and returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return ChildLost(f"{who} child killed by signal {-returncode}")
        message = f"{who} child killed by {sig.name}"
        return ChildKilled(message) if sig in DETERMINISTIC_SIGNALS else ChildLost(message)
    return ChildLost(f"{who} child exited with status {returncode} without answering")


class Child:
    """One long-lived child interpreter; `call` is serialized (one call at a time)."""

    def __init__(self, interpreter: str | None = None) -> None:
        self.interpreter = interpreter
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _started(self) -> subprocess.Popen[str]:
        from backends.sdk.process import python_argv

        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                python_argv("-m", "backends.sdk.child_call", interpreter=self.interpreter),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        return self._proc

    def call(self, function: str, args: Any, log: Path, who: str, timeout_s: float | None = None) -> Any:
        """Runs `function` ("module:name") with the JSON value `args` in the child; returns its JSON
        result. BackendErrors raised there are raised here as the same kind; a dead child raises
        `crash_error`; Unloadable when the child cannot import `function`. Past `timeout_s` the child
        is killed and the call raises ChildHung: a hang in a toolchain fails its stage instead of
        holding the run."""
        job = {
            "function": function,
            "args": args,
            "log": str(log),
            "env": dict(os.environ),
            "cwd": os.getcwd(),
        }
        with self._lock:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            expired = threading.Event()
            timer = None if timeout_s is None else threading.Timer(timeout_s, _expire, (proc, expired))
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                proc.stdin.write(json.dumps(job) + "\n")
                proc.stdin.flush()
                reply = proc.stdout.readline()
            except (BrokenPipeError, OSError):
                reply = ""
            finally:
                if timer is not None:
                    timer.cancel()
            if not reply:
                self._proc = None
                code = _reaped(proc)
                if expired.is_set():
                    raise ChildHung(f"{who} child did not answer within {timeout_s:g} s and was killed")
                raise crash_error(who, code)
        return _answer(json.loads(reply))

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _expire(proc: subprocess.Popen[str], expired: threading.Event) -> None:
    expired.set()
    proc.kill()


def _reaped(proc: subprocess.Popen[str]) -> int | None:
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


_KINDS: dict[str, type[BackendError]] = {
    "terminal": TerminalError,
    "transient": TransientError,
    "missing": ToolchainMissing,
}


def _answer(reply: dict[str, Any]) -> Any:
    if reply.get("ok"):
        return reply.get("result")
    kind, message = str(reply.get("kind")), str(reply.get("message"))
    if kind == "unloadable":
        raise Unloadable(message)
    if kind in _KINDS:
        raise _KINDS[kind](message)
    raise TransientError(f"crashed: {message}")


# ---------------------------------------------------------------- the child's side


def _resolve(function: str) -> Any:
    module, _, name = function.partition(":")
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise Unloadable(f"{function}: {exc}") from exc
    return found


def _kind(exc: BaseException) -> str:
    if isinstance(exc, Unloadable):
        return "unloadable"
    if isinstance(exc, TerminalError):
        return "terminal"
    if isinstance(exc, ToolchainMissing):
        return "missing"
    if isinstance(exc, BackendError):
        return "transient"
    return "crash"


def _run(job: dict[str, Any]) -> dict[str, Any]:
    os.environ.clear()
    os.environ.update(job["env"])
    tempfile.tempdir = None  # recomputed from the caller's TMPDIR
    os.chdir(job["cwd"])
    log = Path(job["log"])
    log.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    with log.open("a") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            hook = os.environ.get(TEST_ONLY_SIGSEGV)
            if hook and hook in job["log"]:
                os.kill(os.getpid(), signal.SIGSEGV)
            result = _resolve(job["function"])(job["args"])
            return {"ok": True, "result": result}
        except Exception as exc:
            if _kind(exc) == "crash":
                traceback.print_exc()
            message = str(exc) if _kind(exc) != "crash" else f"{type(exc).__name__}: {exc}"
            return {"ok": False, "kind": _kind(exc), "message": message}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved, 2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
            os.close(saved)


def main() -> None:
    die_with_parent()  # elsewhere stdin EOF ends it
    replies: IO[str] = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever a toolchain prints must never reach the protocol
    os.close(devnull)
    for line in sys.stdin:
        if line.strip():
            reply = _run(json.loads(line))
            try:
                text = json.dumps(reply)
            except (TypeError, ValueError) as exc:
                text = json.dumps({"ok": False, "kind": "terminal", "message": f"result is not JSON: {exc}"})
            replies.write(text + "\n")
            replies.flush()


if __name__ == "__main__":  # run as the imported module, so its exception classes are the callers'
    from backends.sdk.child_call import main as module_main

    module_main()
