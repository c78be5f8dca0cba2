"""The managed tflite and coreml venvs: what `npuctl toolchain install NAME` produced holds the pins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.sdk import toolchains
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


def test_a_missing_toolchain_is_one_line_and_the_stage_is_not_built(tmp_path: Path) -> None:
    """An Ethos-U spec (tflite toolchain) and an Apple one (coreml) on a machine with neither, applied
    together: each names its own install command."""
    from tests.conftest import DIGITS_SPEC, copy_digits, git

    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo, eval_samples=4, calib_samples=4)
    quant = "  quantization:\n    mode: ptq\n    calibration: {data: ../data/calib, samples: 4}\n"
    wanted = {
        "u55": ("ethos-u55", "toolchain install tflite"),
        "ane": ("apple-ane", "toolchain install coreml"),
    }
    for name, (target, _) in wanted.items():
        text = DIGITS_SPEC.format(name=name).replace("target: cpu", f"target: {target}")
        (repo / "specs" / f"{name}.yaml").write_text(text.replace("  evaluate:", quant + "  evaluate:"))
    result = run_npuctl(repo, "apply", "--json", env={"NPUCTL_TOOLCHAINS": str(tmp_path / "none")})
    assert result.returncode in (1, 3), result.stdout + result.stderr
    specs = {s["name"]: s for s in json.loads(result.stdout)["specs"]}
    for name, (_, line) in wanted.items():
        stages = {s["name"]: s for s in specs[name]["stages"]}
        assert stages["quantize"]["action"] != "built"
        reason = stages["quantize"]["reason"]
        assert "not built" in reason and line in reason and "\n" not in reason, reason
        assert all(v["passed"] is not True for v in specs[name]["slo"]), (
            "nothing passes on a model never built"
        )
