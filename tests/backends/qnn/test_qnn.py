"""The QNN bundle: files checked against the formats in toolchains.md §5, the tools run when present."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import onnx
import pytest

from backends.catalog import targets
from backends.passes.importer import import_model
from backends.qnn import QnnBackend
from backends.qnn.adapter import QnnCompile, htp_config, quantization_overrides
from backends.sdk import bundles, metadata
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.vendor_bundle import PREPROCESS_KEY, SENSITIVE_KEY

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, _ = import_model(DIGITS / "model.onnx", {"image": [1, 1, 8, 8]}, lambda _: None)
    path = tmp_path_factory.mktemp("digits") / "model.onnx"
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


@pytest.fixture(autouse=True)
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def _request(tmp_path: Path, stage: str, config: dict[str, Any], inputs: dict[str, Path]) -> StageRequest:
    work = tmp_path / f"work-{stage}-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    return StageRequest(stage, targets()["qualcomm-htp-v75"], config, inputs, work, work / "log.txt")


def _config(mode: str = "ptq", **options: Any) -> dict[str, Any]:
    return {
        "target": "qualcomm-htp-v75",
        "compile": {"cores": None, "batch": 1, "optimization_level": 2, "options": options},
        "rewrite.fusion": {},
        "quantization.mode": mode,
    }


def _annotated(tmp_path: Path, source: Path, records: dict[str, Any]) -> Path:
    return metadata.annotate(source, tmp_path / "annotated.onnx", records)


def test_bundle_without_the_sdk_is_recorded_and_evaluate_says_not_installed(
    tmp_path: Path, digits: Path
) -> None:
    model = onnx.load(str(digits))
    kept = [{"node": model.graph.node[-1].name, "precision": "fp16", "rule": "op_types[0] 'Gemm'"}]
    source = _annotated(tmp_path, digits, {SENSITIVE_KEY: {"mode": "ptq", "kept": kept}})
    out = QnnCompile().run(
        _request(tmp_path, "compile", _config(vtcm_mb=4, perf_profile="balanced"), {"model": source})
    )
    assert set(out.artifacts) == {"bundle"} and out.report["tool_ran"] is False
    assert "qnn-onnx-converter" in out.note and "QNN_SDK_ROOT" in out.note
    bundle = out.artifacts["bundle"]
    assert bundles.names(bundle) == sorted(
        [
            "model.onnx",
            "build.sh",
            "htp_config.json",
            "htp_backend_extensions.json",
            "manifest.json",
            "quantization_overrides.json",
        ]
    )
    again = QnnCompile().run(
        _request(tmp_path, "compile", _config(vtcm_mb=4, perf_profile="balanced"), {"model": source})
    )
    assert again.artifacts["bundle"].read_bytes() == bundle.read_bytes(), "reproducible bundle"
    # the context-binary config (HTP backend extensions)
    ext = json.loads(bundles.read(bundle, "htp_backend_extensions.json"))
    assert ext["backend_extensions"]["config_file_path"] == "htp_config.json"
    assert ext["backend_extensions"]["shared_library_path"].endswith("libQnnHtpNetRunExtensions.so")
    htp = json.loads(bundles.read(bundle, "htp_config.json"))
    assert htp["graphs"] == [{"graph_names": ["model"], "O": 2, "vtcm_mb": 4, "fp16_relaxed_precision": 1}]
    device = htp["devices"][0]
    assert device["soc_model"] == "SM8650" and device["dsp_arch"] == "v75"
    assert device["cores"][0]["perf_profile"] == "balanced"
    # AIMET encodings overrides: the kept Gemm's activations and weights at 16-bit float
    overrides = json.loads(bundles.read(bundle, "quantization_overrides.json"))
    assert set(overrides) == {"activation_encodings", "param_encodings"}
    gemm = model.graph.node[-1]
    assert overrides["activation_encodings"][gemm.output[0]] == [{"bitwidth": 16, "dtype": "float"}]
    weight = next(i for i in gemm.input if i in {t.name for t in model.graph.initializer})
    assert overrides["param_encodings"][weight] == [{"bitwidth": 16, "dtype": "float"}]
    # the command lines
    script = bundles.read(bundle, "build.sh").decode()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    convert, libgen, context = json.loads(bundles.read(bundle, "manifest.json"))["commands"]
    assert convert[0].endswith("/qnn-onnx-converter") and convert[1:3] == ["--input_network", "model.onnx"]
    assert convert[convert.index("--input_dim") : convert.index("--input_dim") + 3] == [
        "--input_dim",
        "image",
        "1,1,8,8",
    ]
    assert convert[-2:] == ["--quantization_overrides", "quantization_overrides.json"]
    assert libgen[0].endswith("/qnn-model-lib-generator") and "-c" in libgen
    assert context[0].endswith("/qnn-context-binary-generator")
    assert context[context.index("--config_file") + 1] == "htp_backend_extensions.json"
    assert context[context.index("--binary_file") + 1] == "model"
    for line in (convert, libgen, context):
        assert " ".join(line) in script.replace('"$QNN_SDK_ROOT"', "$QNN_SDK_ROOT")
    # the bundle alone is not something to measure: evaluate runs the EPContext model (test_qnn_ep.py)
    evaluate = QnnBackend().stages["evaluate"].load()
    with pytest.raises(TerminalError) as info:
        evaluate.run(
            _request(tmp_path, "evaluate", {"target": "qualcomm-htp-v75", "evaluate": {}}, out.artifacts)
        )
    assert "\n" not in str(info.value) and "context_model" in str(info.value)


def test_input_flags_from_the_preprocess_section(tmp_path: Path) -> None:
    """A model whose input takes the raw frame (uint8 NHWC) after the shared preprocess fold."""
    from onnx import TensorProto, helper

    node = helper.make_node("Cast", ["frame"], ["y"], to=TensorProto.FLOAT, name="cast")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("frame", TensorProto.UINT8, [1, 32, 48, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 48, 3])],
    )  # fmt: skip
    path = tmp_path / "raw.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    section = {"input": "frame", "layout": "nhwc", "dtype": "uint8", "color": {"from": "rgb", "to": "bgr"}}
    source = _annotated(tmp_path, path, {PREPROCESS_KEY: section})
    out = QnnCompile().run(_request(tmp_path, "compile", _config("fp16"), {"model": source}))
    convert = json.loads(bundles.read(out.artifacts["bundle"], "manifest.json"))["commands"][0]
    text = " ".join(convert)
    assert "--input_layout frame NHWC" in text and "--input_dtype frame uint8" in text
    assert "--input_encoding frame rgb rgb" in text, "the swap is in the graph: no second conversion"
    assert "--float_bitwidth 16" in text and "--quantization_overrides" not in text


def test_overrides_precisions() -> None:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("Relu", ["a"], ["y"], name="r"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [w])  # fmt: skip
    model = helper.make_model(graph)
    out = quantization_overrides(
        model, [{"node": "mm", "precision": "int16"}, {"node": "r", "precision": "fp32"}]
    )
    assert out == {
        "activation_encodings": {
            "a": [{"bitwidth": 16, "dtype": "int"}],
            "y": [{"bitwidth": 32, "dtype": "float"}],
        },
        "param_encodings": {"W": [{"bitwidth": 16, "dtype": "int"}]},
    }
    assert quantization_overrides(model, []) is None
    with pytest.raises(TerminalError):
        quantization_overrides(model, [{"node": "mm", "precision": "int4"}])


def test_htp_config_levels() -> None:
    target = targets()["qualcomm-htp-v73"]
    assert htp_config(target, {"optimization_level": 0})["graphs"][0]["O"] == 1
    cfg = htp_config(target, {"optimization_level": 3, "options": {"hvx_threads": 4, "soc_model": "SM8550"}})
    assert cfg["graphs"][0]["O"] == 3 and cfg["graphs"][0]["hvx_threads"] == 4
    assert cfg["devices"][0]["soc_model"] == "SM8550" and cfg["devices"][0]["dsp_arch"] == "v73"


def _fake_sdk(root: Path) -> Path:
    """Stand-ins for the SDK tools that check their arguments and write what the real ones write."""
    bin_dir = root / "bin" / "x86_64-linux-clang"
    bin_dir.mkdir(parents=True)
    scripts = {
        "qnn-onnx-converter": 'test -f model.onnx; [[ "$*" == *"--input_dim"* ]]; touch out/model.cpp out/model.bin',
        "qnn-model-lib-generator": "test -f out/model.cpp; mkdir -p out/lib/x86_64-linux-clang; "
        "touch out/lib/x86_64-linux-clang/libmodel.so",
        "qnn-context-binary-generator": "test -f htp_config.json; test -f out/lib/x86_64-linux-clang/libmodel.so; "
        "printf CTX > out/model.bin",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/usr/bin/env bash\nset -euo pipefail\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return root


def test_the_tools_run_when_the_sdk_is_present(
    tmp_path: Path, digits: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QNN_SDK_ROOT", str(_fake_sdk(tmp_path / "qairt" / "2.31.0")))
    assert QnnBackend().fingerprint()["qnn_sdk"] == "2.31.0"
    out = QnnCompile().run(_request(tmp_path, "compile", _config(), {"model": digits}))
    assert out.report["tool_ran"] is True and out.artifacts["context"].read_bytes() == b"CTX"
    log = (out.artifacts["context"].parent / "log.txt").read_text()
    assert "qnn-context-binary-generator" in log and str(tmp_path) in log


def test_a_failing_tool_fails_the_stage(
    tmp_path: Path, digits: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_sdk(tmp_path / "sdk")
    (root / "bin" / "x86_64-linux-clang" / "qnn-onnx-converter").write_text(
        "#!/bin/sh\necho 'ERROR: op X' >&2\nexit 3\n"
    )
    monkeypatch.setenv("QNN_SDK_ROOT", str(root))
    with pytest.raises(TerminalError, match="qnn-onnx-converter failed"):
        QnnCompile().run(_request(tmp_path, "compile", _config(), {"model": digits}))
    assert os.environ["QNN_SDK_ROOT"] == str(root)
