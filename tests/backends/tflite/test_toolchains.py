"""The managed tflite and coreml venvs: what `npuctl toolchain install NAME` produced holds the pins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends import toolchains
from tests.conftest import run_npuctl


@pytest.mark.parametrize("tc", [toolchains.TFLITE, toolchains.COREML], ids=lambda tc: tc.name)
def test_an_installed_toolchain_holds_its_pins_and_is_listed(
    tc: toolchains.Toolchain, tmp_path: Path
) -> None:
    if toolchains.python(tc) is None:
        pytest.skip(f"`npuctl toolchain install {tc.name}` not run (.ci/setup runs it)")
    installed = toolchains.installed_versions(toolchains.location(tc))
    for requirement in (*tc.requirements, *tc.no_deps):
        name, _, pinned = requirement.partition("==")
        if pinned:
            version = installed[toolchains._canonical(name)]
            assert version.split("+")[0] == pinned, f"{name}: {version} != {pinned}"
    assert "torchvision" not in installed, "PyPI's torchvision breaks beside CPU torch"
    listed = json.loads(run_npuctl(tmp_path, "toolchain", "list", "--json").stdout)["toolchains"]
    row = next(t for t in listed if t["name"] == tc.name)
    assert row["installed"] is True and row["fingerprint"] == toolchains.fingerprint(tc)
    again = run_npuctl(tmp_path, "toolchain", "install", tc.name)
    assert again.returncode == 0 and "already installed" in again.stdout + again.stderr
