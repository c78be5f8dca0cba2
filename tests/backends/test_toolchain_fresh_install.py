"""`npuctl toolchain install` from nothing: the smallest managed environment (coreml: coremltools,
onnx2torch and CPU torch) installed into an empty folder by the real command, then used by apply.

pip's own wheel cache may serve the wheels (a real install, not a download); nothing of the machine's
installed toolchains is reused: NPUCTL_TOOLCHAINS points at the test's empty folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from backends.sdk import toolchains
from reconciler.state.store import Store
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

pytestmark = pytest.mark.slow


def _dist_versions(venv: Path) -> dict[str, str]:
    """name -> version, read here from the venv's dist-info folder names."""
    found = {}
    for info in venv.glob("lib/python*/site-packages/*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


@pytest.mark.timeout(1800)
def test_install_from_nothing_then_the_coreml_backend_builds(tmp_path: Path) -> None:
    root = tmp_path / "toolchains"
    env = {"NPUCTL_TOOLCHAINS": str(root)}
    before = json.loads(run_npuctl(tmp_path, "toolchain", "list", "--json", env=env).stdout)
    assert next(t for t in before["toolchains"] if t["name"] == "coreml")["installed"] is False

    done = run_npuctl(tmp_path, "toolchain", "install", "coreml", env=env, timeout=1700)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    venv = root / toolchains.COREML.dirname
    assert sorted(p.name for p in root.iterdir()) == [venv.name], "no staging folder left behind"
    versions = _dist_versions(venv)
    for pin in ("coremltools==9.0", "onnx2torch==1.5.15", "numpy==1.26.4", "onnx==1.19.1"):
        name, _, wanted = pin.partition("==")
        assert versions.get(name) == wanted, (pin, versions.get(name))
    assert versions["torch"].split("+")[0] == "2.13.0" and "torchvision" not in versions
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", "import coremltools; print(coremltools.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "9.0"  # onnx2torch is imported by the conversion below
    after = json.loads(run_npuctl(tmp_path, "toolchain", "list", "--json", env=env).stdout)
    row = next(t for t in after["toolchains"] if t["name"] == "coreml")
    assert row["installed"] is True and row["path"] == str(venv)

    # the backend then runs on it: a real .mlpackage, converted by the venv just installed
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo, eval_samples=4, calib_samples=4)
    text = DIGITS_SPEC.format(name="d").replace("target: cpu", "target: apple-ane")
    (repo / "specs" / "d.yaml").write_text(
        text.replace("  evaluate:", "  quantization: {mode: fp16}\n  evaluate:")
    )
    applied = run_npuctl(repo, "apply", "--json", env=env)
    assert applied.returncode == 3, applied.stdout[-2000:] + applied.stderr[-2000:]  # Core ML never runs here
    stages = {s["name"]: s for s in json.loads(applied.stdout)["specs"][0]["stages"]}
    assert stages["compile"]["action"] == "built", stages["compile"]
    lock = json.loads((repo / "specs" / "d.lock.json").read_text())
    artifact = lock["variants"]["default"]["stages"]["compile"]["artifacts"]["mlpackage"]
    assert (
        Store(repo / ".npuctl" / "store").path(artifact["digest"]).stat().st_size == artifact["size"] > 1000
    )
    logs = list((repo / ".npuctl" / "logs" / "d" / "default").glob("compile-*.log"))
    assert logs and str(venv / "bin" / "python") in logs[0].read_text(), "converted by the fresh venv"
    shutil.rmtree(root)  # 1.1 GB: not left in pytest's kept temporary folders
