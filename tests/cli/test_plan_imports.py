"""A no-op plan's start-up: what it imports (not its time: a wall-clock assert would be noise)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from reconciler.state import statcache
from tests.conftest import run_npuctl

PROGRAM = (
    "import sys\n"
    "from reconciler.cli import cli\n"
    "rc = cli.main(['plan'], standalone_mode=False)\n"
    "heavy = ('importlib.metadata', 'email.parser', 'pydantic', 'yaml', 'onnx', 'onnxruntime', 'numpy')\n"
    "print(rc, sorted(m for m in heavy if m in sys.modules))\n"
)


def test_a_no_op_plan_imports_no_metadata_scan_validation_or_toolchain(digits_repo: Path) -> None:
    past = 1_600_000_000 * 10**9  # a file modified just now is never cached (reconciler.spec._cache)
    for path in (digits_repo / "specs").iterdir():
        os.utime(path, ns=(past, past))
    time.sleep(statcache.RACY_NS / 1e9 + 0.1)  # utime sets the ctime to now, which the racy rule reads too
    assert run_npuctl(digits_repo, "apply").returncode == 0
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=digits_repo, capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout[-2000:] + done.stderr[-2000:]
