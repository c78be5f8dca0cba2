"""The managed venv: location, marker, fingerprint without importing, idempotent install, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import registry
from backends.catalog import targets
from backends.rknn import RknnBackend
from backends.sdk import toolchains
from backends.sdk.errors import ToolchainMissing

ROOT = Path(__file__).resolve().parents[3]


def _fake_venv(root: Path, versions: dict[str, str]) -> Path:
    venv = root / toolchains.RKNN.dirname
    site = venv / "lib" / "python3.11" / "site-packages"
    for name, ver in versions.items():
        info = site / f"{name.replace('-', '_')}-{ver}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n\nlong description\n"
        )
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def test_location_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    assert toolchains.location(toolchains.RKNN) == tmp_path / "rknn-2.5.0"
    monkeypatch.delenv("NPUCTL_TOOLCHAINS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert toolchains.root() == tmp_path / "cache" / "npuctl" / "toolchains"


def test_missing_venv_is_one_install_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    backend = RknnBackend()
    message = backend.missing_toolchain()
    assert message is not None and "\n" not in message
    assert "npuctl toolchain install rknn" in message
    registry.backend.cache_clear()
    with pytest.raises(ToolchainMissing, match="npuctl toolchain install rknn"):
        registry.implementation(targets()["rk3588"], "compile")
    # without the venv, the fingerprint is the pinned versions (what an install produces)
    fp = backend.fingerprint()
    assert fp["rknn-toolkit2"] == "2.5.0" and fp["numpy"] == "1.26.4" and fp["torch"] == "2.13.0"


def test_fingerprint_is_read_from_the_marker_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    venv = _fake_venv(tmp_path, {"rknn-toolkit2": "2.5.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"})
    versions = toolchains.installed_versions(venv)
    assert versions == {"numpy": "1.26.4", "rknn-toolkit2": "2.5.0", "torch": "2.13.0+cpu"}
    assert toolchains.python(toolchains.RKNN) is None, "no marker: not complete"
    record = {"format": 1, "toolchain": "rknn", "version": "2.5.0", "versions": versions}
    (venv / toolchains.MARKER).write_text(json.dumps(record))
    assert toolchains.python(toolchains.RKNN) == venv / "bin" / "python"
    fp = toolchains.fingerprint(toolchains.RKNN)
    assert fp["torch"] == "2.13.0+cpu" and fp["onnx"] == "missing"
    assert RknnBackend().missing_toolchain() is None


def test_the_compile_key_holds_the_whole_venv_and_the_host_isa(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unpinned dependency of the toolkit (here opencv) changes the compile's key, pip does not."""
    from backends.rknn.stages import RknnCompile
    from backends.sdk.host import host_isa

    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    pinned = {"rknn-toolkit2": "2.5.0", "numpy": "1.26.4", "torch": "2.13.0+cpu"}
    venv = _fake_venv(tmp_path, pinned)

    def compile_fp(extra: dict[str, str]) -> dict[str, str]:
        record = {"format": 1, "toolchain": "rknn", "version": "2.5.0", "versions": {**pinned, **extra}}
        (venv / toolchains.MARKER).write_text(json.dumps(record))
        return RknnCompile().fingerprint()

    base = compile_fp({"opencv-python-headless": "4.10.0.84", "pip": "23.2.1"})
    assert base["host_isa"] == host_isa() and base["host_isa"].startswith(("x86_64", "aarch64", "arm"))
    assert compile_fp({"opencv-python-headless": "4.10.0.84", "pip": "24.0"}) == base
    bumped = compile_fp({"opencv-python-headless": "4.11.0.86", "pip": "23.2.1"})
    assert bumped["host_environment"] != base["host_environment"]
    assert {k: v for k, v in bumped.items() if k != "host_environment"} == {
        k: v for k, v in base.items() if k != "host_environment"
    }


def test_the_compile_key_holds_the_hosts_memory_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel and the CPUs the worker may use fix the host addresses rknn-toolkit2 writes into a
    .rknn (its worker runs without address randomization): pinned to one CPU, a process keys apart."""
    import platform
    import subprocess
    import sys

    from backends.rknn.stages import RknnCompile

    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    venv = _fake_venv(tmp_path, {"rknn-toolkit2": "2.5.0"})
    record = {"format": 1, "toolchain": "rknn", "version": "2.5.0", "versions": {"rknn-toolkit2": "2.5.0"}}
    (venv / toolchains.MARKER).write_text(json.dumps(record))
    fp = RknnCompile().fingerprint()
    assert fp["host_kernel"] == platform.release()
    allowed = len(os.sched_getaffinity(0))
    assert fp["host_cpus"] == str(allowed)
    one = next(iter(os.sched_getaffinity(0)))
    code = (
        f"import os; os.sched_setaffinity(0, {{{one}}}); "
        "from backends.sdk.host import memory_layout; print(memory_layout()['cpus'])"
    )
    pinned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert pinned.stdout.strip() == "1"
    assert allowed == 1 or pinned.stdout.strip() != fp["host_cpus"]


def test_install_keeps_a_complete_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    venv = _fake_venv(tmp_path, {"rknn-toolkit2": "2.5.0"})
    (venv / toolchains.MARKER).write_text(json.dumps({"format": 1, "versions": {"rknn-toolkit2": "2.5.0"}}))
    lines: list[str] = []
    assert toolchains.install(toolchains.RKNN, log=lines.append) == venv
    assert any("already installed" in line for line in lines)


@pytest.mark.slow
def test_failed_install_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_TOOLCHAINS", str(tmp_path))
    broken = toolchains.Toolchain(
        name="broken",
        version="0",
        requirements=("no-such-package-npuctl-test==0.0.0",),
        no_deps=(),
        check_import="json",
        fingerprint_dists=("json",),
        install_hint="none",
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(toolchains.InstallError, match="pip install"):
        toolchains.install(broken)
    assert not toolchains.location(broken).exists()
    assert not list(tmp_path.glob(".broken-*"))


def test_cli_list_json(tmp_path: Path) -> None:
    env = {"NPUCTL_TOOLCHAINS": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "toolchain", "list", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    row = data["toolchains"][0]
    assert data["format_version"] == 1 and row["name"] == "rknn" and row["installed"] is False
    assert row["path"] == str(tmp_path / "rknn-2.5.0")


def test_cli_unknown_toolchain_fails(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "toolchain", "install", "nope"],
        cwd=ROOT,
        env={"NPUCTL_TOOLCHAINS": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and "unknown toolchain 'nope'" in out.stderr
