"""One real repository for the report tests, built once: float and ptq (with sensitivity) digits specs,
applied and committed twice so the SLO history has two points."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

AUTO = DIGITS_SPEC.format(name="digits-auto").replace(
    "  target: cpu\n",
    "  target: cpu\n  quantization:\n    mode: ptq\n    calibration: {data: ../data/calib, samples: 40}\n"
    "    sensitive_layers: {auto: {max_accuracy_drop: 0.0, max_layers: 2}}\n",
)


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture(scope="session")
def report_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("report") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo)
    (repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    (repo / "specs" / "digits-auto.yaml").write_text(AUTO)
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    _commit(repo, "digits v1")
    for name in ("digits.yaml", "digits-auto.yaml"):
        spec = repo / "specs" / name
        spec.write_text(spec.read_text().replace("version: v1", "version: v2").replace("runs: 5", "runs: 8"))
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    _commit(repo, "digits v2")
    return repo
