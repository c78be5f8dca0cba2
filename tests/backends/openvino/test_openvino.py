"""OpenVINO compile/evaluate/check and the NNCF quantize on the real digits model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from backends.catalog import targets
from backends.openvino import OPTIONS_SCHEMA, OpenVinoBackend
from backends.openvino.compile import OpenVinoCompile, properties
from backends.openvino.quantize import ignored_scope_args
from backends.passes.importer import import_model
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError

ov = pytest.importorskip("openvino")
ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, _ = import_model(DIGITS / "model.onnx", {"image": [1, 1, 8, 8]}, lambda _: None)
    path = tmp_path_factory.mktemp("digits") / "model.onnx"
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


def _request(tmp_path: Path, stage: str, config: dict[str, Any], inputs: dict[str, Path]) -> StageRequest:
    work = tmp_path / f"work-{stage}-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    return StageRequest(stage, targets()["intel-npu"], config, inputs, work, work / "log.txt")


def _compile_config(mode: str = "none", **compile_cfg: Any) -> dict[str, Any]:
    base = {"cores": None, "batch": 1, "optimization_level": 3, "options": {}}
    base.update(compile_cfg)
    return {"target": "intel-npu", "compile": base, "rewrite.fusion": {}, "quantization.mode": mode}


def test_precision_is_always_explicit() -> None:
    assert properties({}, "none") == {
        "INFERENCE_PRECISION_HINT": "f32",
        "NUM_STREAMS": "1",
        "PERFORMANCE_HINT": "LATENCY",
    }
    assert properties({}, "fp16")["INFERENCE_PRECISION_HINT"] == "f16"
    assert properties({}, "ptq")["INFERENCE_PRECISION_HINT"] == "f32"
    custom = properties(
        {"cores": 2, "options": {"performance_hint": "THROUGHPUT", "inference_precision": "bf16"}}, "none"
    )
    assert custom == {
        "INFERENCE_NUM_THREADS": "2",
        "INFERENCE_PRECISION_HINT": "bf16",
        "PERFORMANCE_HINT": "THROUGHPUT",
    }


def test_compile_saves_an_uncompressed_ir_with_its_properties(tmp_path: Path, digits: Path) -> None:
    out = OpenVinoCompile().run(_request(tmp_path, "compile", _compile_config(cores=2), {"model": digits}))
    xml, binary, cfg = (out.artifacts[k] for k in ("openvino_xml", "openvino_bin", "openvino_config"))
    settings = json.loads(cfg.read_text())
    assert settings["properties"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert settings["properties"]["INFERENCE_NUM_THREADS"] == "2"
    assert settings["device"] == ("NPU" if "NPU" in ov.Core().available_devices else "CPU")
    assert settings["compress_to_fp16"] is False
    assert out.report["effective_properties"]["INFERENCE_PRECISION_HINT"] == "f32", "no silent bf16"
    model = ov.Core().read_model(str(xml), str(binary))
    consts = [op for op in model.get_ops() if op.get_type_name() == "Constant"]
    assert any(c.get_element_type() == ov.Type.f32 and c.get_output_size() for c in consts)
    assert not any(c.get_element_type() == ov.Type.f16 for c in consts), "weights kept in f32"
    again = OpenVinoCompile().run(_request(tmp_path, "compile", _compile_config(cores=2), {"model": digits}))
    assert again.artifacts["openvino_bin"].read_bytes() == binary.read_bytes()
    assert again.artifacts["openvino_xml"].read_bytes() == xml.read_bytes()


def test_a_model_in_a_folder_with_a_comma_compiles_to_the_same_ir(tmp_path: Path, digits: Path) -> None:
    """ov.convert_model reads "a,b" as two paths ("/tmp/x" does not exist): a repository whose path
    holds a comma compiles through a link, to the same IR bytes as anywhere else."""
    folder = tmp_path / "models, v2"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(digits.read_bytes())
    here = OpenVinoCompile().run(_request(tmp_path, "compile", _compile_config(), {"model": digits}))
    there = OpenVinoCompile().run(
        _request(tmp_path, "compile", _compile_config(), {"model": folder / "model.onnx"})
    )
    for key in ("openvino_xml", "openvino_bin"):
        assert there.artifacts[key].read_bytes() == here.artifacts[key].read_bytes(), key


def test_fp16_compresses_weights(tmp_path: Path, digits: Path) -> None:
    out = OpenVinoCompile().run(_request(tmp_path, "compile", _compile_config("fp16"), {"model": digits}))
    assert json.loads(out.artifacts["openvino_config"].read_text())["compress_to_fp16"] is True
    assert out.report["properties"]["INFERENCE_PRECISION_HINT"] == "f16"


def test_forcing_an_absent_device_is_terminal(tmp_path: Path, digits: Path) -> None:
    if "GPU" in ov.Core().available_devices:
        pytest.skip("this host has a GPU")
    with pytest.raises(TerminalError, match="GPU is not available"):
        OpenVinoCompile().run(
            _request(tmp_path, "compile", _compile_config(options={"device": "GPU"}), {"model": digits})
        )


@pytest.mark.slow
def test_evaluate_measures_the_ir_and_says_where(tmp_path: Path, digits: Path) -> None:
    from backends.openvino.evaluate import OpenVinoEvaluate

    compiled = OpenVinoCompile().run(_request(tmp_path, "compile", _compile_config(), {"model": digits}))
    config = {
        "target": "intel-npu",
        "evaluate": {"runner": "local", "warmup": 2, "runs": 10, "metric": "top1"},
    }
    inputs = {
        **compiled.artifacts,
        "model": digits,
        "float_model": digits,
        "eval_data": DIGITS / "data" / "eval",
        "labels": DIGITS / "data" / "eval" / "labels.txt",
    }
    out = OpenVinoEvaluate().run(_request(tmp_path, "evaluate", config, inputs))
    m = out.report["measurements"]
    npu = "NPU" in ov.Core().available_devices
    assert m["latency_ms.p90"]["evidence"] == ("measured:device" if npu else "measured:host")
    if not npu:
        detail = m["latency_ms.p90"]["detail"]  # evidence about this host's CPU, named, not the NPU
        assert detail.startswith("OpenVINO CPU plugin on ") and ", not the NPU" in detail, detail
        assert "OpenVINO CPU plugin, f32, on this host; target NPU not used" in detail
        assert m["latency_ms.p90"]["on_target"] is False
    assert m["accuracy"]["value"] > 0.9 and m["accuracy.reference"]["evidence"] == "measured:host"
    assert abs(m["accuracy"]["value"] - m["accuracy.reference"]["value"]) < 0.01, "f32 IR == float ONNX"
    assert out.report["runtime"]["runtime"] == "openvino"


def test_check_keeps_the_table_without_an_npu_and_records_the_cpu_query(tmp_path: Path, digits: Path) -> None:
    if "NPU" in ov.Core().available_devices:
        pytest.skip("this host has an NPU")
    impl = OpenVinoBackend().stages["check"].load()
    config = {
        "target": "intel-npu",
        "quantization.mode": "none",
        "quantization.weights": "int8",
        "quantization.activations": None,
    }
    out = impl.run(_request(tmp_path, "check", config, {"model": digits}))
    query = out.report["openvino_query"]
    assert query["npu_present"] is False and query["ops_supported"] > 0
    assert out.report["source"].startswith("op-table")


def test_query_model_map_overrides_the_table(digits: Path) -> None:
    """The backend map wins where it names a node: a CPU answer from query_model moves the node."""
    from backends.openvino.check import device_map
    from backends.passes import placement as P

    model = onnx.load(str(digits))
    names = [n.name for n in model.graph.node]
    supported = {n.output[0]: "NPU" for n in model.graph.node[:-1]}
    mapping = device_map(model, supported, "NPU")
    assert mapping[names[-1]] == "CPU" and all(mapping[n] == "NPU" for n in names[:-1])
    report = P.compute(
        model,
        targets()["intel-npu"],
        {"mode": "none"},
        device_map=mapping,
        device_map_source="openvino query_model(NPU)",
    )
    assert report["source"] == "openvino query_model(NPU)"
    runtime_nodes = {n["name"]: n for n in report["nodes"]}
    if names[-1] in runtime_nodes:
        assert runtime_nodes[names[-1]]["device"] == "CPU"


def test_ignored_scope_from_sensitive_rules(digits: Path) -> None:
    from backends.passes.quant.policy import SensitiveRules

    model = onnx.load(str(digits))
    first = model.graph.node[0].name
    args = ignored_scope_args(
        model, SensitiveRules("fp16", nodes=(first, "/head/*"), op_types=("Gemm",), last=1)
    )
    assert first in args["names"] and args["types"] == ["Gemm"]
    import re

    assert args["patterns"] and re.match(args["patterns"][0], "/head/Gemm")
    assert not re.match(args["patterns"][0], "/body/Conv")


@pytest.mark.slow
def test_nncf_quantize_keeps_ignored_layers_float(tmp_path: Path, digits: Path) -> None:
    from backends.openvino.quantize import NncfQuantize

    section = {
        "mode": "ptq",
        "weights": "int8",
        "activations": "int8",
        "per_channel": True,
        "calibration": {"data": "calib", "samples": 20, "method": "minmax", "seed": 0},
        "sensitive_layers": {"keep": "fp16", "op_types": ["Gemm"]},
    }
    inputs = {"model": digits, "float_model": digits, "calibration_data": DIGITS / "data" / "calib"}
    out = NncfQuantize().run(
        _request(tmp_path, "quantize", {"quantization": section, "target": "intel-npu"}, inputs)
    )
    model = onnx.load(str(out.artifacts["model"]))
    assert out.report["samples"] == 20 and out.report["quantize_nodes"] > 0
    producers = {o: n for n in model.graph.node for o in n.output}
    for gemm in (n for n in model.graph.node if n.op_type == "Gemm"):
        source = producers.get(gemm.input[0])
        assert source is None or source.op_type != "DequantizeLinear", f"{gemm.name} input was quantized"
    bad = {**section, "sensitive_layers": {"keep": "fp16", "op_types": ["LSTM"]}}
    with pytest.raises(TerminalError, match="sensitive_layers"):
        NncfQuantize().run(
            _request(tmp_path, "quantize", {"quantization": bad, "target": "intel-npu"}, inputs)
        )


def test_calibration_method_maps_onto_nncf_range_estimators(tmp_path: Path, digits: Path) -> None:
    """minmax and percentile give different NNCF ranges, so different digests; entropy,
    which NNCF has no estimator for, is refused with the field."""
    from backends.openvino.quantize import NncfQuantize

    inputs = {"model": digits, "float_model": digits, "calibration_data": DIGITS / "data" / "calib"}
    built = {}
    for name in ("minmax", "percentile", "e"):
        (tmp_path / name).mkdir()
    for method in ("minmax", "percentile"):
        calibration = {"data": "calib", "samples": 20, "method": method, "percentile": 99.0, "seed": 0}
        section = {"mode": "ptq", "weights": "int8", "activations": "int8", "calibration": calibration}
        out = NncfQuantize().run(
            _request(tmp_path / method, "quantize", {"quantization": section, "target": "intel-npu"}, inputs)
        )
        assert method in out.note and "NNCF" in out.report["range_estimator"]
        built[method] = out.artifacts["model"].read_bytes()
    assert built["minmax"] != built["percentile"]
    entropy = {"mode": "ptq", "calibration": {"data": "calib", "samples": 20, "method": "entropy"}}
    with pytest.raises(TerminalError, match=r"calibration\.method: openvino/nncf has no entropy"):
        NncfQuantize().run(
            _request(tmp_path / "e", "quantize", {"quantization": entropy, "target": "intel-npu"}, inputs)
        )


def test_bias_correction_false_turns_off_nncfs_own(tmp_path: Path, digits: Path) -> None:
    """quantization.bias_correction maps onto NNCF's disable_bias_correction: other biases, and the note
    says which."""
    from backends.openvino.quantize import NncfQuantize

    inputs = {"model": digits, "float_model": digits, "calibration_data": DIGITS / "data" / "calib"}
    built, notes = {}, {}
    for on in (True, False):
        (tmp_path / str(on)).mkdir()
        section = {"mode": "ptq", "calibration": {"data": "calib", "samples": 20}, "bias_correction": on}
        out = NncfQuantize().run(
            _request(tmp_path / str(on), "quantize", {"quantization": section, "target": "intel-npu"}, inputs)
        )
        built[on], notes[on] = out.artifacts["model"].read_bytes(), out.note
    assert built[True] != built[False]
    assert "bias correction on" in notes[True] and "bias correction off" in notes[False]


def test_options_schema_rejects_unknown_and_bad_values() -> None:
    from jsonschema import Draft202012Validator

    v = Draft202012Validator(OPTIONS_SCHEMA)
    assert not list(v.iter_errors({"performance_hint": "LATENCY", "num_streams": 2}))
    assert list(v.iter_errors({"performance_hint": "FAST"}))
    assert list(v.iter_errors({"threads": 2}))


def test_nncf_quantizes_an_export_whose_weights_are_constant_nodes(tmp_path: Path) -> None:
    """silero-vad's OpenVINO export (MIT) holds its conv weights and biases as Constant nodes of an
    inlined branch; NNCF reads them as initializers only, so the pass moves them there first."""
    import numpy as np

    from backends.openvino.quantize import NncfQuantize
    from tests.backends.tasks.task_models import wheel_file

    path = wheel_file(
        "silero-vad==6.2.3",
        "silero_vad",
        "data/silero_vad_openvino_16k.onnx",
        ("data/silero_vad_openvino_16k.onnx",),
    )
    model, _ = import_model(path, {"input": [1, 576], "state": [2, 1, 128]}, lambda _: None)
    source = tmp_path / "model.onnx"
    source.write_bytes(model.SerializeToString(deterministic=True))
    assert any(
        n.op_type == "Constant" and n.output[0].endswith("reparam_conv.bias") for n in model.graph.node
    )
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        audio = (0.1 * rng.standard_normal((1, 576))).astype(np.float32)
        np.savez(calib / f"{i}.npz", input=audio, state=np.zeros((2, 1, 128), np.float32))
    section = {
        "mode": "ptq",
        "weights": "int8",
        "activations": "int8",
        "per_channel": True,
        "calibration": {"data": "calib", "samples": 4, "method": "minmax", "seed": 0},
    }
    inputs = {"model": source, "float_model": source, "calibration_data": calib}
    out = NncfQuantize().run(
        _request(tmp_path, "quantize", {"quantization": section, "target": "intel-npu"}, inputs)
    )
    quantized = onnx.load(str(out.artifacts["model"]))
    producers = {o: n for n in quantized.graph.node for o in n.output}
    convs = [n for n in quantized.graph.node if n.op_type == "Conv"]
    assert convs and all(
        producers[c.input[1]].op_type == "DequantizeLinear" for c in convs if c.input[1] in producers
    )
    assert out.report["quantize_nodes"] > 0
