"""Code planted in a repository never runs: `reconciler/`, `backends/`, `venv/`, `pip/` and `onnxruntime/`
packages in the repository root (and in its specs folder) are never imported by npuctl or by any child
it starts, through `apply` (with evaluate on the local runner), `watch` and a toolchain install.

The npuctl process itself is started the way the installed `npuctl` entry point runs (`python -I -m
reconciler`: the working directory is not on its path); everything it starts is what is under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from backends.sdk import toolchains

PLANTED = ("reconciler", "backends", "venv", "pip", "onnxruntime")


def plant(folder: Path, canaries: Path) -> None:
    """Packages that, when imported, leave a canary file named after themselves (and after where)."""
    for name in PLANTED:
        package = folder / name
        package.mkdir(parents=True, exist_ok=True)
        marker = canaries / f"{name}@{folder.name}"
        code = f"open({str(marker)!r}, 'w').write('imported')\n"
        (package / "__init__.py").write_text(code)
        (package / "__main__.py").write_text(code)


@pytest.fixture
def planted_repo(digits_repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    plant(digits_repo, canaries)
    plant(digits_repo / "specs", canaries)
    return digits_repo, canaries


def npuctl_isolated(cwd: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    return subprocess.Popen(
        [sys.executable, "-I", "-m", "reconciler", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def test_apply_with_evaluate_runs_nothing_planted(planted_repo: tuple[Path, Path]) -> None:
    repo, canaries = planted_repo
    proc = npuctl_isolated(repo, "apply", "--json")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    stages = {s["name"]: s["action"] for s in json.loads(out)["specs"][0]["stages"]}
    assert stages["evaluate"] == "built"  # benchprog ran in its own interpreter, importing onnxruntime
    assert sorted(p.name for p in canaries.iterdir()) == []


@pytest.mark.slow
def test_watch_runs_nothing_planted(planted_repo: tuple[Path, Path]) -> None:
    repo, canaries = planted_repo
    proc = npuctl_isolated(repo, "watch", "--json", "--debounce", "200")
    try:
        deadline = time.monotonic() + 300
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "status" and event.get("state") in ("Healthy", "failed", "invalid"):
                assert event["state"] == "Healthy", event
                break
            assert time.monotonic() < deadline
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert (repo / "specs" / "digits.lock.json").is_file()
    assert sorted(p.name for p in canaries.iterdir()) == []


def _tiny_wheel(folder: Path, name: str) -> Path:
    """A real, minimal wheel (pip installs it from the file, offline)."""
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", record)
    return wheel


@pytest.mark.slow
def test_toolchain_install_runs_nothing_planted(
    planted_repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real install path (python -m venv, pip, the import check) from inside the planted repository."""
    repo, canaries = planted_repo
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dep, tool = _tiny_wheel(wheels, "probe_dep"), _tiny_wheel(wheels, "probe_tool")
    tc = toolchains.Toolchain(
        name="probe",
        version="0.1",
        requirements=(str(dep),),
        no_deps=(str(tool),),
        check_import="probe_tool",
        fingerprint_dists=("probe-tool",),
        install_hint="test",
    )
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path / "toolchains"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.chdir(repo)
    venv = toolchains.install(tc)
    assert toolchains.installed_versions(venv)["probe-tool"] == "0.1"
    assert sorted(p.name for p in canaries.iterdir()) == []
