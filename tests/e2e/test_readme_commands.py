"""The README's two set-up commands, as a new user runs them: the first in a fresh clone with a fresh
virtual environment (pip may reuse its wheel cache) exits 0 and leaves `git status` clean; the second is
held to `.ci/run` by tests/test_quick_start.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, git

README = ROOT / "README.md"


def quick_start_commands() -> list[str]:
    """The shell blocks of the README's Quick start section, in order."""
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


@pytest.mark.slow
def test_the_main_job_in_a_fresh_clone_exits_0_and_leaves_git_clean(tmp_path: Path) -> None:
    main = quick_start_commands()[0]
    clone = tmp_path / "npuctl"
    git(tmp_path, "clone", "-q", str(ROOT), str(clone))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "VIRTUAL_ENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "CI": "true",
    }
    for name in (
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_CONFIG_FILE",
        "NPUCTL_TOOLCHAINS",
    ):
        if name in os.environ:
            env[name] = os.environ[name]
    done = subprocess.run(
        ["bash", "-c", main], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    status = git(clone, "status", "--porcelain", "--untracked-files=all")
    assert status == "", f"the main job changed the clone:\n{status}"
