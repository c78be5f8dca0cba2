"""A cancelled apply that does not stop on SIGINT is killed after the grace period, and the work
folders it could not clean (named by its pid) are removed by the watcher; another process's stay."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from reconciler.repo import Layout
from reconciler.watch.runner import SubprocessJob

STUBBORN = (
    "import os, signal, sys, time\n"
    "from pathlib import Path\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "tmp = Path('.npuctl') / 'tmp'\n"
    "(tmp / f'{os.getpid()}-0123456789abcdef' / 'out').mkdir(parents=True)\n"
    "(tmp / f'{os.getpid()}-tmp-x').mkdir()\n"
    "(tmp / 'ready').write_text('1')\n"
    "time.sleep(60)\n"
)


def test_a_killed_apply_leaves_no_work_folder(tmp_path: Path) -> None:
    tmp = Layout(tmp_path).tmp
    tmp.mkdir(parents=True)
    other = tmp / "1-0123456789abcdef"
    other.mkdir()
    spec = tmp_path / "spec.yaml"
    job = SubprocessJob(spec, [sys.executable, "-c", STUBBORN], tmp_path, dict(os.environ))
    deadline = time.monotonic() + 60
    while not (tmp / "ready").exists():
        assert time.monotonic() < deadline and job.poll() is None, "the stub did not start"
        time.sleep(0.05)
    assert len(list(tmp.glob(f"{job.process.pid}-*"))) == 2
    job.cancel()
    result = job.poll()
    assert result is not None and result.cancelled and result.returncode == -9
    assert list(tmp.glob(f"{job.process.pid}-*")) == []
    assert other.is_dir()
