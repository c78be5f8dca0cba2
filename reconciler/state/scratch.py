"""Where a run's temporary files go: `.npuctl/tmp/<pid>-tmp-*`, never the machine's /tmp.

While a workspace is open, Python's `tempfile` and every child process (through TMPDIR) put their
temporary files in one folder of the repository's state, removed when the workspace closes; a run
killed with -9 leaves it behind under its pid, and `npuctl gc` removes folders of dead pids.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def redirect(tmp_root: Path) -> Callable[[], None]:
    """Points tempfile and TMPDIR at a fresh folder under `tmp_root`; returns the undo (which removes it)."""
    tmp_root.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"{os.getpid()}-tmp-", dir=tmp_root)
    saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = folder
    os.environ["TMPDIR"] = folder

    def undo() -> None:
        if tempfile.tempdir == folder:
            tempfile.tempdir = saved_dir
        if os.environ.get("TMPDIR") == folder:
            if saved_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_env
        shutil.rmtree(folder, ignore_errors=True)

    return undo


def remove_of(tmp_root: Path, pid: int) -> int:
    """Removes the work folders a killed process left under `tmp_root` (every engine folder there is
    named `<pid>-...`: this module's and each stage run's); returns how many there were."""
    found = [p for p in tmp_root.glob(f"{pid}-*") if p.is_dir() and not p.is_symlink()]
    for folder in found:
        shutil.rmtree(folder, ignore_errors=True)
    return len(found)
