"""The ethos-u backend end to end: onnx2tf full-int8 TFLite, vela's compile and estimates, LiteRT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backends import toolchains
from reconciler.state.store import Store
from tests.conftest import DIGITS_SPEC, run_npuctl

pytest.importorskip("ethosu.vela")
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
"""


def custom_ops(path: Path) -> list[str]:
    """The custom operator codes of a .tflite (read with vela's own flatbuffer schema)."""
    from ethosu.vela.tflite.Model import Model

    model = Model.GetRootAsModel(path.read_bytes(), 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    return [c.CustomCode().decode() for c in codes if c.CustomCode()]


def test_apply_compiles_with_vela_and_records_its_estimates(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: ethos-u55")
    text = text.replace("  evaluate:", QUANT + "  evaluate:")
    spec.write_text(
        text.replace("latency_ms: {p90: 1000}", "latency_ms: {p90: 1000}\n    peak_memory_mb: 0.001")
    )
    result = run_npuctl(digits_repo, "apply", "--json")
    assert result.returncode == 3, result.stdout + result.stderr  # the SRAM bound is below vela's figure
    out = json.loads(result.stdout)["specs"][0]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["latency_ms.p90"]["evidence"] == "estimated: vela"
    assert verdicts["latency_ms.p90"]["passed"] is None, "met on an estimate is never a plain pass"
    assert (
        verdicts["peak_memory_mb"]["evidence"] == "estimated: vela"
        and verdicts["peak_memory_mb"]["passed"] is False
    )
    assert (
        verdicts["accuracy.min"]["evidence"] == "measured:host" and verdicts["accuracy.min"]["passed"] is True
    )
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    variant = lock["variants"]["default"]
    measured = variant["measurements"]
    cycles = measured["npu_cycles"]
    assert cycles["evidence"] == "estimated: vela" and cycles["value"] > 1000
    # latency = vela's cycles at its clock
    store = Store(digits_repo / ".npuctl" / "store")
    artifacts = variant["stages"]["compile"]["artifacts"]
    record = json.loads(store.path(artifacts["vela_report"]["digest"]).read_text())
    clock = record["summary"]["core_clock"]
    assert measured["latency_ms.p90"]["value"] == pytest.approx(cycles["value"] / clock * 1000, rel=1e-3)
    assert record["placement"]["npu_operators"] > 0 and record["placement"]["source"].startswith("vela ")
    assert record["per_layer"] and all(row["target"] in ("NPU", "CPU") for row in record["per_layer"])
    # the artifact is what the Ethos-U driver loads: a .tflite holding vela's ethos-u custom operator
    optimised = store.path(artifacts["vela_model"]["digest"])
    assert "ethos-u" in custom_ops(optimised)
    # LiteRT accuracy of the int8 model against the float model's, computed here
    import onnxruntime as ort

    session = ort.InferenceSession(str(digits_repo / "models" / "digits.onnx"))
    labels = dict(line.split() for line in (digits_repo / "data/eval/labels.txt").read_text().splitlines())
    hits = [
        int(np.argmax(session.run(None, {"image": np.load(digits_repo / "data/eval" / n)})[0]) == int(label))
        for n, label in labels.items()
    ]
    assert measured["accuracy.reference"]["value"] == pytest.approx(sum(hits) / len(hits))
    assert abs(measured["accuracy"]["value"] - sum(hits) / len(hits)) <= 0.05


def test_a_float_spec_on_an_ethos_u_is_refused_with_the_reason(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: ethos-u85"))
    result = run_npuctl(digits_repo, "apply", "--json")
    assert result.returncode == 1
    stages = {s["name"]: s for s in json.loads(result.stdout)["specs"][0]["stages"]}
    assert stages["compile"]["action"] == "failed"
    assert "ethos-u85 takes full_int8 or int16_act" in stages["compile"]["reason"]


def test_a_real_detector_on_ethos_u85(git_repo: Path) -> None:
    from tests.backends.detector import write_det_repo

    write_det_repo(git_repo, "ethos-u85")
    result = run_npuctl(git_repo, "apply", "--json")
    assert result.returncode in (0, 3), result.stdout + result.stderr
    lock = json.loads((git_repo / "specs" / "det.lock.json").read_text())
    measured = lock["variants"]["default"]["measurements"]
    assert (
        measured["npu_cycles"]["evidence"] == "estimated: vela" and measured["npu_cycles"]["value"] > 10_000
    )
    assert measured["accuracy"]["evidence"] == "measured:host"
    assert measured["accuracy"]["value"] >= 0.3, measured["accuracy"]
    store = Store(git_repo / ".npuctl" / "store")
    artifacts = lock["variants"]["default"]["stages"]["compile"]["artifacts"]
    assert "ethos-u" in custom_ops(store.path(artifacts["vela_model"]["digest"]))
