"""Installed distributions' versions and entry-point groups, read the way importlib.metadata reads
them but without its cost on the no-op path.

`importlib.metadata` costs ~30 ms of a 0.2 s `plan`: its import (email parsing), and an entry-point
scan that reads every installed distribution. Here one listing per `sys.path` folder (once a run)
finds a distribution's `*.dist-info` / `*.egg-info` folder by the same normalized name, its version
is the `Version:` header of the same metadata file, and a group is looked for as its `[group]`
section header in each `entry_points.txt`. Whenever that is not conclusive (a zip on `sys.path`, no
Version header, a group that is declared), the caller gets importlib.metadata's own answer.
"""

from __future__ import annotations

import os
import re
import sys
from functools import cache


def _normalize(name: str) -> str:
    """importlib.metadata's Prepared.normalize."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _metadata_dirs() -> tuple[tuple[str, str], ...] | None:
    return _listing(tuple(sys.path))


@cache
def _listing(path: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
    """(normalized name, folder) of every distribution on `path`, in its order; None when an entry
    is a zip archive (importlib.metadata looks inside it: defer to it)."""
    found: list[tuple[str, str]] = []
    for entry in path:
        folder = entry or "."
        try:
            children = sorted(os.listdir(folder))
        except NotADirectoryError:
            return None
        except OSError:
            continue
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                found.append(
                    (_normalize(low.rpartition(".")[0].partition("-")[0]), os.path.join(folder, child))
                )
    return tuple(found)


def _header(folder: str) -> str | None:
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        return None
                    if line.startswith("Version:"):
                        return line[len("Version:") :].strip()
        except (OSError, UnicodeDecodeError):
            continue
    return None


def version(name: str) -> str | None:
    """The installed version of distribution `name`, None when it is not installed."""
    dirs = _metadata_dirs()
    if dirs is not None:
        wanted = _normalize(name)
        folder = next((f for n, f in dirs if n == wanted), None)
        found = _header(folder) if folder is not None else None
        if found:
            return found
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(name)
    except PackageNotFoundError:
        return None


def may_declare(group: str) -> bool:
    """False only when no installed distribution declares entry points in `group`."""
    dirs = _metadata_dirs()
    if dirs is None:
        return True
    header = re.compile(rf"^\[\s*{re.escape(group)}\s*\]", re.M)
    for _, folder in dirs:
        try:
            with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as fh:
                if header.search(fh.read()):
                    return True
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError):
            return True
    return False
