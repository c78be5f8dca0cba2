"""The README's second Quick start command is what a newcomer types and what CI runs: `.ci/run` holds the
same steps, one a line, and the command's install resolves in a fresh venv with the pip that venv ships
(read from the README, so a README change is what is tested)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, source_copy

README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
CHECKS = ("# >>> checks", "# <<< checks")
"""The block of `.ci/run` that is its own (linters), not the README's."""
PREAMBLE = ["set -euo pipefail", 'cd "$(dirname "$0")/.."']
RESOLVE_BUDGET_S = 120
"""The dev install resolves in under two minutes (pip's cache warm, as on a CI machine that ran before)."""


def quick_start_commands() -> list[str]:
    """The `sh` blocks of the README's Quick start section, in order."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def readme_steps() -> list[str]:
    """The second Quick start command, split into its `&&` steps."""
    return [step.strip() for step in quick_start_commands()[1].split(" && ")]


def ci_run_steps() -> list[str]:
    """`.ci/run`'s command lines after its preamble, the checks block left out."""
    lines: list[str] = []
    inside = False
    for raw in CI_RUN.read_text().splitlines():
        line = raw.strip()
        if line.startswith(CHECKS[0]):
            inside = True
        elif line.startswith(CHECKS[1]):
            inside = False
        elif line and not inside and not line.startswith("#"):
            lines.append(line)
    assert lines[: len(PREAMBLE)] == PREAMBLE, "strict mode, then the checkout's root"
    return lines[len(PREAMBLE) :]


def test_ci_run_is_the_readme_command() -> None:
    assert ci_run_steps() == readme_steps()
    assert os.access(CI_RUN, os.X_OK)


def test_the_command_starts_in_a_fresh_venv_before_it_installs() -> None:
    steps = readme_steps()
    install = next(i for i, step in enumerate(steps) if step.startswith("pip install"))
    assert re.fullmatch(r"python3 -m venv --clear (\S+)", steps[0]), "a fresh venv, not the machine's"
    venv = steps[0].split()[-1]
    assert f". {venv}/bin/activate" in steps[1:install], "pip and python are the venv's"


@pytest.mark.slow
def test_the_dev_install_resolves_in_a_fresh_venv_with_the_pip_it_ships(tmp_path: Path) -> None:
    """The command's steps up to its `pip install`, run as written in a copy of the sources, the install
    with `--dry-run` (pip resolves and downloads, installs nothing)."""
    steps = readme_steps()
    install = next(i for i, step in enumerate(steps) if step.startswith("pip install"))
    venv = steps[0].split()[-1]
    checkout = source_copy(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    bundled = subprocess.run(
        ["python3", "-c", "import ensurepip; print(ensurepip.version())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    script = " && ".join([*steps[:install], "pip --version", f"{steps[install]} --dry-run"])
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version_line = done.stdout.splitlines()[0]
    assert version_line.startswith(f"pip {bundled} from {checkout / venv}/"), "the bundled pip, not upgraded"
    assert re.search(r"^Would install .*\bnpuctl-0\.1\.0\b", done.stdout, re.M), done.stdout[-2000:]
    assert took < RESOLVE_BUDGET_S, f"resolved in {took:.0f} s (venv made, pip {bundled})"
