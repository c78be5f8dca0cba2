"""Real rknn-toolkit2 builds in the managed venv: int8 with calibration, hybrid layers, reproducible
bytes, the core mask sidecar, simulator accuracy, and an abort that fails the stage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rknn_helpers import Request, conv_model, needs_rknn

from backends.catalog import targets
from backends.rknn.preprocess import RknnPreprocess
from backends.rknn.stages import RknnCompile, RknnEvaluate, RknnQuantize
from backends.sdk.errors import TerminalError

pytestmark = [pytest.mark.slow, needs_rknn]

SECTION = {"input": "x", "layout": "nhwc", "dtype": "uint8", "color": {"from": "rgb", "to": "bgr"},
           "mean": [127.5, 127.5, 127.5], "std": [58.0, 57.0, 57.5]}  # fmt: skip
COMPILE = {"cores": 3, "batch": 1, "optimization_level": 3, "options": {}}


def _quantized(tmp_path: Path, make_request: Request, calib: Path, **quant: object) -> tuple[Path, Path]:
    pre = RknnPreprocess().run(
        make_request(
            "preprocess", {"preprocess": SECTION, "inputs": {}}, {"model": conv_model(tmp_path / "m.onnx")}
        )
    )
    float_model = pre.artifacts["model"]
    section = {
        "mode": "ptq",
        "weights": "int8",
        "activations": "int8",
        "per_channel": True,
        "calibration": {"data": "calib", "samples": 8, "method": "minmax", "seed": 0},
        **quant,
    }
    q = RknnQuantize().run(
        make_request(
            "quantize",
            {"quantization": section, "target": "rk3588"},
            {"model": float_model, "float_model": float_model, "calibration_data": calib},
        )
    )
    return float_model, q.artifacts["model"]


def _compile(
    make_request: Request, model: Path, compile_cfg: dict[str, object] = COMPILE, target: str = "rk3588"
) -> dict[str, Path]:
    config = {"target": target, "compile": compile_cfg, "rewrite.fusion": {}, "quantization.mode": "ptq"}
    out = RknnCompile().run(make_request("compile", config, {"model": model}, targets()[target]))
    return out.artifacts


def test_int8_build_is_reproducible_and_records_the_core_mask(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    _, bundle = _quantized(tmp_path, make_request, calib_folder)
    first = _compile(make_request, bundle)
    second = _compile(make_request, bundle)
    assert first["rknn"].read_bytes()[:4] == b"RKNN"
    assert first["rknn"].read_bytes() == second["rknn"].read_bytes(), "same inputs, same .rknn bytes"
    meta = json.loads(first["rknn_meta"].read_text())
    assert meta["core_mask"] == {"cores": 3, "name": "NPU_CORE_0_1_2", "value": 7}
    assert meta["quantized_dtype"] == "w8a8" and meta["target_platform"] == "rk3588"
    assert meta["input"]["mean_values"] == [127.5, 127.5, 127.5]
    assert meta["input"]["std_values"] == [57.5, 57.0, 58.0], "fed (rgb) order; the model is bgr"


def test_sensitive_layers_go_through_hybrid_quantization(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    _, bundle = _quantized(
        tmp_path, make_request, calib_folder, sensitive_layers={"keep": "fp16", "nodes": ["conv2"]}
    )
    meta = json.loads(_compile(make_request, bundle)["rknn_meta"].read_text())
    assert meta["hybrid_layers"] == ["c2"]
    assert meta["build_request"]["hybrid"]["custom_hybrid"] == [["r1", "c2"]]


def test_a_tail_the_toolkit_cannot_name_is_built_without_it_and_said(
    tmp_path: Path, make_request: Request, calib_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode tail's anchors are ONNX names the toolkit may have renamed or folded: then the build
    goes on without the float16 tail (what it was before) and the compile's report and note say why."""
    from backends.rknn import stages

    real = stages.quant_plan

    def with_tail(*args: object) -> tuple[dict[str, object], list[str]]:
        plan, notes = real(*args)  # type: ignore[arg-type]
        plan["tail_hybrid"] = {"custom_hybrid": [["no_such_tensor", "y"]], "nodes": ["gap", "flat"]}
        return plan, notes

    monkeypatch.setattr(stages, "quant_plan", with_tail)
    _, bundle = _quantized(tmp_path, make_request, calib_folder)
    config = {"target": "rk3588", "compile": COMPILE, "rewrite.fusion": {}, "quantization.mode": "ptq"}
    out = RknnCompile().run(make_request("compile", config, {"model": bundle}, targets()["rk3588"]))
    tail = out.report["tail_hybrid"]
    assert tail["kept"] is False and "no_such_tensor" in tail["why"], tail
    assert "decode tail left int8" in out.note
    assert out.artifacts["rknn"].read_bytes()[:4] == b"RKNN"
    assert json.loads(out.artifacts["rknn_meta"].read_text())["hybrid_layers"] == []


def test_simulator_accuracy_against_the_float_model(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    float_model, bundle = _quantized(tmp_path, make_request, calib_folder)
    artifacts = _compile(make_request, bundle)
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    rng = np.random.default_rng(5)
    for i in range(6):
        np.save(eval_dir / f"{i:03d}.npy", rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8))
    config = {"target": "rk3588", "evaluate": {"runner": "local", "metric": "top1", "warmup": 1, "runs": 1}}
    inputs = {**artifacts, "model": bundle, "float_model": float_model, "eval_data": eval_dir}
    out = RknnEvaluate().run(make_request("evaluate", config, inputs))
    acc = out.report["measurements"]["accuracy"]
    assert acc["evidence"] == "measured:host simulator"
    assert 0.0 <= acc["value"] <= 1.0 and out.report["accuracy"]["fidelity"]["cosine"] > 0.98
    assert out.report["simulator"]["artifact_reproduced"] is True
    analysis = out.report["accuracy_analysis"]
    assert analysis["layers"] > 3 and "single_cos" in analysis["worst_single"][0]
    assert not list(Path("/tmp").glob("npuctl-rknn-*/snapshot")), "the per-layer dump is not kept"


def test_toolchain_abort_is_a_failed_stage_with_the_log_tail(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    """rk2118 aborts the toolkit (SIGABRT, exit 134) on an ordinary conv model."""
    _, bundle = _quantized(tmp_path, make_request, calib_folder)
    options = {**COMPILE, "cores": None, "options": {"target_platform": "rk2118"}}
    with pytest.raises(TerminalError) as info:
        _compile(make_request, bundle, options)
    message = str(info.value)
    assert "exited with 134 (abort)" in message or "aborted" in message
    assert "unsupported" in message.lower() or "E RKNN" in message
    assert 1 < len(message.splitlines()) <= 21


def test_impossible_core_mask_fails_before_building(
    tmp_path: Path, make_request: Request, calib_folder: Path
) -> None:
    _, bundle = _quantized(tmp_path, make_request, calib_folder)
    with pytest.raises(TerminalError, match="rk3566 has 1 NPU core"):
        _compile(make_request, bundle, {**COMPILE, "cores": 3}, target="rk3566")


def test_an_int8_build_is_checked_on_the_simulator_against_its_float_source(
    tmp_path: Path, make_request: Request, calib_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compile simulates its int8 build on 4 random inputs (no evaluate.data) and scores it against
    the float ONNX in ONNX Runtime; a build whose outputs are wrong (here: the simulator's outputs
    negated, as a broken quantization would give) is a failed compile naming both numbers."""
    from backends.rknn import simulate

    _, bundle = _quantized(tmp_path, make_request, calib_folder)
    config = {"target": "rk3588", "compile": COMPILE, "rewrite.fusion": {}, "quantization.mode": "ptq"}
    out = RknnCompile().run(make_request("compile", config, {"model": bundle}))
    check = out.report["check"]
    assert check["ran"] and check["passed"] and check["budget"] == 0.5, check
    assert check["metric"] == "generic cosine" and check["float"] == pytest.approx(1.0), check
    assert check["data"] == "4 random inputs (seed 0) against the float model", check
    assert check["quantized"] > 0.98, "the same bound as the simulator accuracy test's cosine"

    real = simulate.outputs

    def negated(sim: Path, like: object, count: int) -> object:
        found = real(sim, like, count)  # type: ignore[arg-type]
        found.values = [[-v for v in row] for row in found.values]
        return found

    monkeypatch.setattr(simulate, "outputs", negated)
    with pytest.raises(TerminalError) as info:
        RknnCompile().run(make_request("compile", config, {"model": bundle}))
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith("compile: the rknn int8 build on the toolkit's simulator scores -"), message
    assert "(generic cosine on 4 random inputs (seed 0) against the float model): drop " in message
    assert "> 0.5, the budget of a broken model" in message
