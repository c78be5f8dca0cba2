"""The coreml backend: a real .mlpackage (fp16 / int8 weights) built on Linux, never claimed to run."""

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
        toolchains.python(toolchains.COREML) is None,
        reason="needs `npuctl toolchain install coreml` (.ci/setup)",
    ),
]

PROGRAM_OPS = """\
import sys, coremltools as ct
model = ct.models.MLModel(sys.argv[1], skip_model_load=True)
spec = model.get_spec()
ops = sorted({op.type for f in spec.mlProgram.functions.values() for b in f.block_specializations.values() for op in b.operations})
print(spec.WhichOneof("Type"), " ".join(ops))
"""


def _program(package: Path) -> tuple[str, set[str]]:
    """(model type, op types), read back by coremltools itself (no Core ML runtime)."""
    py = toolchains.python(toolchains.COREML)
    out = subprocess.run(
        [str(py), "-I", "-c", PROGRAM_OPS, str(package)], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], set(out[1:])


@pytest.mark.parametrize("mode", ["fp16", "ptq"])
def test_apply_builds_an_mlpackage_and_says_it_was_not_run(
    digits_repo: Path, mode: str, tmp_path: Path
) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    quant = f"  quantization:\n    mode: {mode}\n    calibration: {{data: ../data/calib, samples: 4}}\n"
    compile_ = "  compile: {options: {compute_units: CPU_AND_NE}}\n"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: apple-ane")
    spec.write_text(text.replace("  evaluate:", quant + compile_ + "  evaluate:"))
    result = run_npuctl(digits_repo, "apply", "--json")
    assert result.returncode == 3, result.stdout + result.stderr
    out = json.loads(result.stdout)["specs"][0]
    stages = {s["name"]: s for s in out["stages"]}
    assert stages["compile"]["action"] == "built"
    assert stages["evaluate"]["action"] != "built" and "macOS" in stages["evaluate"]["reason"]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["accuracy.min"]["passed"] is None and verdicts["latency_ms.p90"]["passed"] is not True
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    artifact = lock["variants"]["default"]["stages"]["compile"]["artifacts"]["mlpackage"]
    tar = Store(digits_repo / ".npuctl" / "store").path(artifact["digest"])
    names = bundles.names(tar)
    assert "model.mlpackage/Manifest.json" in names
    assert any(n.endswith("model.mlmodel") for n in names) and any(n.endswith("weight.bin") for n in names)
    package = bundles.extract(tar, tmp_path / "x") / "model.mlpackage"
    kind, ops = _program(package)
    assert kind == "mlProgram"
    load = json.loads(bundles.read(tar, "coreml.json"))
    assert load == {
        "compute_units": "CPU_AND_NE",
        "compute_precision": "FLOAT16",
        "deployment_target": "iOS17",
    }
    assert "conv" in ops
    quantized = {op for op in ops if op.startswith("constexpr_")}
    assert bool(quantized) == (mode == "ptq"), ops  # int8 weights are constexpr dequantize ops


def test_a_real_detector_converts_to_an_mlpackage(git_repo: Path, tmp_path: Path) -> None:
    from tests.backends.detector import write_det_repo

    write_det_repo(git_repo, "apple-ane")
    result = run_npuctl(git_repo, "apply", "--json")
    assert result.returncode == 3, result.stdout + result.stderr
    lock = json.loads((git_repo / "specs" / "det.lock.json").read_text())
    compiled = lock["variants"]["default"]["stages"]["compile"]["artifacts"]["mlpackage"]
    tar = Store(git_repo / ".npuctl" / "store").path(compiled["digest"])
    package = bundles.extract(tar, tmp_path / "x") / "model.mlpackage"
    assert (package / "Manifest.json").is_file()
    kind, ops = _program(package)
    assert (
        kind == "mlProgram" and {"conv", "sigmoid"} <= ops and any(op.startswith("constexpr_") for op in ops)
    )
    assert "accuracy" not in lock["variants"]["default"]["measurements"], (
        "nothing measured: Core ML did not run"
    )
