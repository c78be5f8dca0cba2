"""`npuctl apply` for targets whose SDK is not installed here: the bundle is built and recorded in the
lock file, evaluate is "not built: toolchain not installed", and no SLO passes (unverified, exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, run_npuctl

pytestmark = pytest.mark.slow


# Qualcomm's targets build and run for real now (onnxruntime-qnn's HTP simulator; the QNN SDK bundle is
# an extra artifact there: tests/backends/qnn/test_qnn_ep.py); MediaTek's measures its TFLite on LiteRT
# (tests/backends/tflite/test_tflite_backends.py). Huawei's stays a bundle with nothing to measure.
@pytest.mark.parametrize(("target", "tool"), [("ascend-310p", "atc")])
def test_bundle_is_recorded_and_slos_stay_unverified(digits_repo: Path, target: str, tool: str) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(DIGITS_SPEC.format(name="digits").replace("target: cpu", f"target: {target}"))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "QNN_SDK_ROOT": "", "ASCEND_TOOLKIT_HOME": ""}
    result = run_npuctl(digits_repo, "apply", "--json", env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    out = json.loads(result.stdout)["specs"][0]
    stages = {s["name"]: s for s in out["stages"]}
    assert stages["compile"]["action"] == "built"
    assert stages["evaluate"]["action"] == "skipped"
    assert "toolchain not installed" in stages["evaluate"]["reason"] and tool in stages["evaluate"]["reason"]
    # after a complete apply nothing is left to do: the stage that cannot run here is settled, not
    # planned again and again (installing the tool changes its key, and it runs then)
    planned = run_npuctl(digits_repo, "plan", "--json", env=env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    again = json.loads(planned.stdout)["specs"][0]
    assert again["sync"] == "Synced" and all(s["action"] == "cached" for s in again["stages"]), again
    assert not any(v["passed"] is True and v["evidence"].startswith("measured") for v in out["slo"])
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    bundle = lock["variants"]["default"]["stages"]["compile"]["artifacts"]["bundle"]
    assert bundle["file"].endswith("-bundle.tar") and bundle["size"] > 0
