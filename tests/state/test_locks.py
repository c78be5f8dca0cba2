from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from reconciler.state import locks

HOLDER = """
import sys, time
from pathlib import Path
from reconciler.state import locks
with locks.hold(Path(sys.argv[1]), "spec-demo"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_second_process_waits_and_is_told_who_holds_the_lock(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), "2.5"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    told: list[str] = []
    started = time.monotonic()
    with locks.hold(tmp_path, "spec-demo", told.append):
        waited = time.monotonic() - started
    child.wait()
    assert told and f"pid {child.pid}" in told[0]
    assert waited > 0.5, "it waited for the holder instead of building alongside it"
    assert locks.holder_if_held(tmp_path, "spec-demo") is None


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), "60"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    assert locks.holder_if_held(tmp_path, "spec-demo") is not None
    child.kill()
    child.wait()
    with locks.hold(tmp_path, "spec-demo"):
        pass
