"""The mediatek backend end to end: the int8 TFLite, the exact ncc-tflite bundle, LiteRT accuracy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from backends import bundles, toolchains
from reconciler.state.store import Store
from tests.conftest import DIGITS_SPEC, run_npuctl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        toolchains.python(toolchains.TFLITE) is None,
        reason="needs `npuctl toolchain install tflite` (.ci/setup)",
    ),
]

QUANT = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 16, method: minmax}
  compile: {optimization_level: 2, options: {num_mdla: 1}}
"""


def test_apply_writes_the_ncc_tflite_bundle_and_measures_the_tflite_on_litert(
    digits_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: mediatek-mdla3")
    spec.write_text(text.replace("  evaluate:", QUANT + "  evaluate:"))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "NEUROPILOT_SDK_ROOT": ""}
    result = run_npuctl(digits_repo, "apply", "--json", env=env)
    assert result.returncode in (0, 3), result.stdout + result.stderr
    out = json.loads(result.stdout)["specs"][0]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["accuracy.min"]["evidence"] == "measured:host" and verdicts["accuracy.min"]["passed"]
    assert verdicts["latency_ms.p90"]["passed"] is not True, "no APU time without NeuroPilot"
    assert verdicts["latency_ms.p90"]["evidence"] == "estimated"
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    variant = lock["variants"]["default"]
    artifacts = variant["stages"]["compile"]["artifacts"]
    assert {"bundle", "tflite", "tflite_io"} <= set(artifacts) and "dla" not in artifacts
    store = Store(digits_repo / ".npuctl" / "store")
    bundle = store.path(artifacts["bundle"]["digest"])
    assert bundles.names(bundle) == ["build.sh", "manifest.json", "model.tflite"]
    script = bundles.read(bundle, "build.sh").decode()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    (command,) = json.loads(bundles.read(bundle, "manifest.json"))["commands"]
    assert command[0].endswith("/ncc-tflite") and "--arch=mdla3.0" in command and "--opt=2" in command
    assert "--num-mdla=1" in command and command[-3:] == ["model.tflite", "-o", "out/model.dla"]
    assert "--relax-fp32" not in command, "an int8 model needs no fp32 relaxation"
    # the bundled model is the int8 TFLite (TFL3 flatbuffer) evaluate measured
    tflite = bundles.read(bundle, "model.tflite")
    assert tflite[4:8] == b"TFL3" and tflite == store.path(artifacts["tflite"]["digest"]).read_bytes()
    io = json.loads(store.path(artifacts["tflite_io"]["digest"]).read_text())
    assert io["variant"] == "full_int8" and io["io"]["inputs"][0]["dtype"] == "int8"
    measured = variant["measurements"]
    assert measured["accuracy"]["value"] >= measured["accuracy.reference"]["value"] - 0.05
    assert "LiteRT" in measured["accuracy"]["detail"]
