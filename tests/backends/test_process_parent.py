"""A toolchain a stage starts dies with the process that started it: the stage child runs vendor tools
in their own session (so a timeout kills the whole group), which a parent killed by SIGKILL (the
apply's stage child when the apply dies, an OOM kill) could not clean up. Real processes: a Python
parent running `process.run`, killed with SIGKILL, and the shell it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PARENT = """
import sys
from backends.sdk import process
process.run(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 300"], "sleeper", 600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_tool_started_by_a_killed_parent_is_killed_too(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pidfile)], env=env)
    deadline = time.monotonic() + 60
    while not (pidfile.is_file() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    tool = int(pidfile.read_text())
    assert _alive(tool)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(tool) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(tool):
        os.kill(tool, signal.SIGKILL)
        pytest.fail("the tool outlived the process that started it")
