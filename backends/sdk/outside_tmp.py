"""Scratch folders a toolchain must have outside the repository, made so a kill -9 cannot leak them.

rknn-toolkit2 embeds its working folder's path in what it builds, so its folder is made at a path
of the same length on every machine (`/tmp/npuctl-rknn-XXXXXXXX`) instead of in the run's own
temporary folder (`.npuctl/tmp/<pid>-tmp-*`, whose length depends on where the repository is).
Each such folder is recorded by a small pointer file in the run's own temporary folder (TMPDIR, set
by the engine): a run killed with -9 leaves both behind, and `npuctl gc`, removing the dead run's
folder, removes what its pointers name. A pointer is honoured only for a real folder directly in the
machine's temporary root whose name starts with `npuctl-`: a pointer can never make gc delete
anything else.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POINTER_SUFFIX = ".outside-tmp"
PREFIX = "npuctl-"
ROOT = Path("/tmp")


def _root() -> Path:
    return ROOT if ROOT.is_dir() else Path(tempfile.gettempdir())


@contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """A fresh folder `<machine tmp>/<prefix>XXXXXXXX` (fixed length), removed on exit and recorded in
    the run's own temporary folder meanwhile."""
    assert prefix.startswith(PREFIX), prefix
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=_root()))
    pointer = _pointer(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if pointer is not None:
            pointer.unlink(missing_ok=True)


def _pointer(path: Path) -> Path | None:
    """Writes `<TMPDIR>/<name>.outside-tmp` naming `path`, when TMPDIR is not the machine's own root."""
    run_tmp = os.environ.get("TMPDIR")
    if not run_tmp or Path(run_tmp).resolve() == _root().resolve() or not Path(run_tmp).is_dir():
        return None
    pointer = Path(run_tmp) / f"{path.name}{POINTER_SUFFIX}"
    try:
        pointer.write_text(str(path))
    except OSError:  # a full or read-only scratch: the folder is still removed on exit
        return None
    return pointer


def leftovers(run_tmp: Path) -> list[Path]:
    """The outside folders recorded under a (dead) run's temporary folder that still exist."""
    out: list[Path] = []
    root = _root().resolve()
    for pointer in sorted(run_tmp.glob(f"*{POINTER_SUFFIX}")):
        try:
            named = Path(pointer.read_text(errors="replace").strip())
        except OSError:
            continue
        ok = named.is_absolute() and named.parent == root and named.name.startswith(PREFIX)
        if ok and not named.is_symlink() and named.is_dir():
            out.append(named)
    return out
