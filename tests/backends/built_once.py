"""One expensive build shared by the tests that read it: the vendor-toolchain tests apply one repository
holding every spec they check, once per test run, and each test reads its own spec's lock and store.

Under pytest-xdist every worker is its own process with its own module and session fixtures, so the
build is made once for the run in the workers' common temporary folder under a file lock (pytest-xdist's
documented pattern); the first worker builds, the others wait and read. A failed build leaves no
result, so a later caller tries again and fails with its own message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

RESULT = "built.json"


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """This run's temporary folder, the same for every xdist worker."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """(folder, what `build(folder)` returned): built by the first caller of the run, read by the rest.
    `build` gets an empty folder and returns a JSON-able record of what it did."""
    root = shared_root(factory)
    folder = root / f"built-{name}"
    with FileLock(str(root / f"built-{name}.lock")):
        record = folder / RESULT
        if not record.is_file():
            if folder.exists():
                import shutil

                shutil.rmtree(folder)  # a build that failed part way: start clean
            folder.mkdir(parents=True)
            result = build(folder)
            record.write_text(json.dumps(result, sort_keys=True))
        loaded: dict[str, Any] = json.loads(record.read_text())
    return folder, loaded
