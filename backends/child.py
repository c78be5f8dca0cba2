"""How npuctl starts a Python child process: never with the repository, or any folder the user is in,
on its import path.

A repository under reconciliation is untrusted: a `reconciler/`, `venv/` or `onnxruntime/` folder in it
must never shadow npuctl's or a toolchain's modules. `-I` (isolated mode) drops the current directory
and the script's folder from `sys.path` and ignores PYTHON* variables; npuctl itself is still found
through the interpreter's site-packages (an installed or editable npuctl). Every child interpreter npuctl
starts goes through `python_argv`.
"""

from __future__ import annotations

import sys


def python_argv(*args: str, interpreter: str | None = None) -> list[str]:
    """argv for `python -I ARGS...`; `interpreter` defaults to the running one (a managed venv's else)."""
    return [interpreter or sys.executable, "-I", *args]
