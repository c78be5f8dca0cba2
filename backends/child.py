"""How npuctl starts a Python child process: never with the repository, or any folder the user is in,
on its import path.

A repository under reconciliation is untrusted: a `reconciler/`, `venv/` or `onnxruntime/` folder in it
must never shadow npuctl's or a toolchain's modules. `-I` (isolated mode) drops the current directory
and the script's folder from `sys.path` and ignores PYTHON* variables; npuctl itself is still found
through the interpreter's site-packages (an installed or editable npuctl). Every child interpreter npuctl
starts goes through `python_argv`.

A child whose determinism needs a PYTHON* variable (PYTHONHASHSEED for the RKNN toolkit) takes
`keep_env=True`: `-s -P` (no user site, no script or current folder on the path) instead of `-I`; its
caller then passes a fixed environment without PYTHONPATH.
"""

from __future__ import annotations

import sys
from pathlib import Path

NEUTRAL_CWD = "/"
"""A working directory holding nothing importable, for children that need none of their own."""


def python_argv(*args: str, interpreter: str | None = None, keep_env: bool = False) -> list[str]:
    """argv for `python -I ARGS...`; `interpreter` defaults to the running one (a managed venv's else)."""
    flags = ["-s", "-P"] if keep_env else ["-I"]
    return [interpreter or sys.executable, *flags, *args]


def script_argv(script: Path, *args: str, interpreter: str | None = None) -> list[str]:
    """argv running one of npuctl's own files by path, isolated: its folder is not on `sys.path`."""
    return python_argv(str(script), *args, interpreter=interpreter)
