"""How npuctl starts a child process: the argv of a Python child, and one bounded run of any program.

A repository under reconciliation is untrusted: a `reconciler/`, `venv/` or `onnxruntime/` folder in it
must never shadow npuctl's or a toolchain's modules. `-I` (isolated mode) drops the current directory
and the script's folder from `sys.path` and ignores PYTHON* variables; npuctl itself is still found
through the interpreter's site-packages (an installed or editable npuctl). Every child interpreter npuctl
starts goes through `python_argv`.

A child whose determinism needs a PYTHON* variable (PYTHONHASHSEED for the RKNN toolkit) takes
`keep_env=True`: `-s -P` (no user site, no script or current folder on the path) instead of `-I`; its
caller then passes a fixed environment without PYTHONPATH.

`run` is the one way a stage runs a program to completion (a vendor tool, a toolchain worker, a
transport client, benchprog): the child gets its own session, so on timeout its whole process group is
killed (a tool's own children included, nothing else), as it is when the caller is interrupted, and
the timeout is a TransientError the engine retries; a program that cannot be started is a TerminalError. What the exit status means is the
caller's to say. Long-lived children that answer many calls are backends.sdk.child_call's.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from backends.sdk.errors import TerminalError, TransientError

NEUTRAL_CWD = "/"
"""A working directory holding nothing importable, for children that need none of their own."""


def python_argv(*args: str, interpreter: str | None = None, keep_env: bool = False) -> list[str]:
    """argv for `python -I ARGS...`; `interpreter` defaults to the running one (a managed venv's else)."""
    flags = ["-s", "-P"] if keep_env else ["-I"]
    return [interpreter or sys.executable, *flags, *args]


def script_argv(script: Path, *args: str, interpreter: str | None = None) -> list[str]:
    """argv running one of npuctl's own files by path, isolated: its folder is not on `sys.path`."""
    return python_argv(str(script), *args, interpreter=interpreter)


class TimedOut(TransientError):
    """A child ran past its timeout; its process group was killed. What it wrote before is kept."""

    def __init__(self, what: str, timeout_s: float, stdout: str = "", stderr: str = "") -> None:
        super().__init__(f"{what} timed out after {timeout_s:g} s")
        self.stdout = stdout
        self.stderr = stderr


def run(
    argv: Sequence[str],
    what: str,
    timeout_s: float | None,
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    stdout_to_log: bool = True,
    preexec_fn: Callable[[], None] | None = None,
    until: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs `argv` to completion in its own session; `what` names it in errors ("vela", "benchprog").

    Output: without `log`, stdout and stderr are captured as text. With `log`, the command line and
    then stdout and stderr are appended to it (the result's stdout is empty), or, with
    `stdout_to_log=False`, only stderr is appended and stdout is captured (a child answering on stdout).
    TimedOut (transient) past `timeout_s`; TerminalError when the program cannot be started.
    `until`: asked every UNTIL_POLL_S while the child runs; once it says True the child's process group
    is killed (what the caller needed is already written: a verbose log's verdicts) and the result has
    returncode STOPPED.
    """
    argv = list(argv)
    if log is None:
        return _bounded(argv, what, timeout_s, cwd, env, preexec_fn, subprocess.PIPE, subprocess.PIPE, until)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        if not stdout_to_log:
            return _bounded(argv, what, timeout_s, cwd, env, preexec_fn, subprocess.PIPE, fh, until)
        where = f"cd {cwd} && " if cwd is not None else ""
        fh.write(f"$ {where}{shlex.join(argv)}\n")
        fh.flush()
        return _bounded(argv, what, timeout_s, cwd, env, preexec_fn, fh, subprocess.STDOUT, until)


UNTIL_POLL_S = 0.25
STOPPED = -(2**16)
"""The returncode of a run that `until` ended (no exit status or signal is this)."""


def _bounded(
    argv: list[str],
    what: str,
    timeout_s: float | None,
    cwd: Path | str | None,
    env: Mapping[str, str] | None,
    preexec_fn: Callable[[], None] | None,
    stdout: int | IO[str],
    stderr: int | IO[str],
    until: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = _start(argv, cwd, env, preexec_fn, stdout, stderr)
    try:
        out, err, stopped = _communicate(proc, timeout_s, until)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise TimedOut(what, float(timeout_s or 0), out or "", err or "") from None
    except BaseException:  # an interrupt: its own session would keep the child running
        kill_group(proc)
        proc.wait()
        raise
    return subprocess.CompletedProcess(argv, STOPPED if stopped else proc.returncode, out or "", err or "")


def _communicate(
    proc: subprocess.Popen[str], timeout_s: float | None, until: Callable[[], bool] | None
) -> tuple[str, str, bool]:
    """The child's output once it ended, and whether `until` ended it (its process group killed);
    TimeoutExpired past `timeout_s`. A retried communicate loses no output."""
    if until is None:
        out, err = proc.communicate(timeout=timeout_s)
        return out, err, False
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0)
        try:
            out, err = proc.communicate(timeout=UNTIL_POLL_S if left is None else min(UNTIL_POLL_S, left))
            return out, err, False
        except subprocess.TimeoutExpired:
            if until():
                kill_group(proc)
                out, err = proc.communicate()
                return out, err, True


def _start(
    argv: list[str],
    cwd: Path | str | None,
    env: Mapping[str, str] | None,
    preexec_fn: Callable[[], None] | None,
    stdout: int | IO[str],
    stderr: int | IO[str],
) -> subprocess.Popen[str]:
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdout=stdout,
            stderr=stderr,
            text=True,
            start_new_session=True,
            preexec_fn=_with_parent(preexec_fn),
        )
    except OSError as exc:
        raise TerminalError(f"cannot run {argv[0]}: {exc}") from exc


def die_with_parent() -> None:
    """Asks the kernel to SIGKILL this process when the thread that started it dies (Linux's
    PR_SET_PDEATHSIG; a no-op elsewhere). A child in its own session outlives a parent killed by a
    signal it cannot catch (SIGKILL, an OOM kill), which would leave a vendor compiler running for
    its whole timeout after the apply that wanted it is gone."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _with_parent(preexec_fn: Callable[[], None] | None) -> Callable[[], None]:
    parent = os.getpid()

    def preexec() -> None:
        die_with_parent()
        if os.getppid() != parent:  # the parent died before the request took hold
            os._exit(1)
        if preexec_fn is not None:
            preexec_fn()

    return preexec


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kills the process group `proc` leads (it was started in its own session), nothing else."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
