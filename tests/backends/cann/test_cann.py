"""The CANN ATC bundle: atc command, AIPP config, fusion switch file, keep_dtype list (toolchains.md §4)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from backends.cann import CannBackend
from backends.cann.adapter import AIPP_KEY, CannCompile, CannPreprocess, fusion_switch, keep_dtype_lines
from backends.catalog import targets
from backends.passes.preprocess import forms as forms
from backends.sdk import bundles, metadata
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError, ToolchainMissing
from backends.sdk.vendor_bundle import SENSITIVE_KEY

SECTION = {"input": "x", "layout": "nhwc", "dtype": "uint8", "color": {"from": "rgb", "to": "bgr"},
           "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}  # fmt: skip


@pytest.fixture(autouse=True)
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def _model(path: Path) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 24, 32])], [w])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _request(tmp_path: Path, stage: str, config: dict[str, Any], inputs: dict[str, Path]) -> StageRequest:
    work = tmp_path / f"work-{stage}-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    return StageRequest(stage, targets()["ascend-310p"], config, inputs, work, work / "log.txt")


def _compile_config(
    mode: str = "fp16", fusion: dict[str, bool] | None = None, **options: Any
) -> dict[str, Any]:
    return {
        "target": "ascend-310p",
        "compile": {"cores": None, "batch": 1, "optimization_level": 3, "options": options},
        "rewrite.fusion": fusion
        or {"conv_bn": True, "conv_activation": True, "matmul_add": True, "constant_folding": True},
        "quantization.mode": mode,
    }


def _parse_aipp(text: str) -> dict[str, str]:
    """insert_op.proto text format: `aipp_op { key : value ... }`."""
    body = re.fullmatch(r"aipp_op \{\n(.*)\}\n", text, re.S)
    assert body, text
    fields = {}
    for line in body.group(1).splitlines():
        key, sep, value = line.strip().partition(" : ")
        assert sep and re.fullmatch(r"[a-z_0-9]+", key), line
        fields[key] = value
    return fields


def test_aipp_preprocess_leaves_the_graph_and_records_the_config(tmp_path: Path) -> None:
    source = _model(tmp_path / "m.onnx")
    out = CannPreprocess().run(
        _request(tmp_path, "preprocess", {"preprocess": SECTION, "inputs": {}}, {"model": source})
    )
    model = onnx.load(str(out.artifacts["model"]))
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "Softmax"], (
        "AIPP does the work, not the graph"
    )
    plan = metadata.get(model, AIPP_KEY)
    assert plan["supported"] is True and plan["input"] == "x"
    fields = _parse_aipp(plan["config"])
    assert fields["aipp_mode"] == "static" and fields["input_format"] == "RGB888_U8"
    assert fields["src_image_size_w"] == "32" and fields["src_image_size_h"] == "24"
    assert fields["rbuv_swap_switch"] == "true" and fields["csc_switch"] == "false"
    assert fields["mean_chn_0"] == "123" and abs(float(fields["min_chn_0"]) - 0.675) < 1e-6
    assert abs(float(fields["var_reci_chn_0"]) - 1 / 58.395) < 1e-9
    # AIPP's arithmetic on the recorded fields equals the spec's canonical preprocessing
    raw = np.random.default_rng(0).integers(0, 256, (24, 32, 3)).astype(np.uint8)
    got = forms.aipp_apply(plan, raw)
    want = forms.canonical_apply(forms.canonical(SECTION, 3), raw)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_sections_aipp_cannot_express_fall_back_to_the_shared_fold(tmp_path: Path) -> None:
    source = _model(tmp_path / "m.onnx")
    section = {**SECTION, "dtype": "float32"}
    out = CannPreprocess().run(
        _request(tmp_path, "preprocess", {"preprocess": section, "inputs": {}}, {"model": source})
    )
    plan = metadata.get(out.artifacts["model"], AIPP_KEY)
    assert plan["supported"] is False and "AIPP" in plan["note"]


def test_atc_bundle(tmp_path: Path) -> None:
    source = _model(tmp_path / "m.onnx")
    pre = CannPreprocess().run(
        _request(tmp_path, "preprocess", {"preprocess": SECTION, "inputs": {}}, {"model": source})
    )
    kept = [{"node": "softmax", "precision": "fp16", "rule": "op_types[0] 'Softmax'"}]
    model = metadata.annotate(
        pre.artifacts["model"], tmp_path / "q.onnx", {SENSITIVE_KEY: {"mode": "ptq", "kept": kept}}
    )
    fusion = {"conv_bn": False, "conv_activation": True, "matmul_add": True, "constant_folding": True}
    out = CannCompile().run(_request(tmp_path, "compile", _compile_config("ptq", fusion), {"model": model}))
    assert set(out.artifacts) == {"bundle"} and out.report["tool_ran"] is False
    bundle = out.artifacts["bundle"]
    assert bundles.names(bundle) == sorted(
        ["model.onnx", "build.sh", "manifest.json", "fusion_switch.cfg", "aipp.cfg", "keep_dtype.cfg"]
    )
    (atc,) = json.loads(bundles.read(bundle, "manifest.json"))["commands"]
    assert atc[0].endswith("/atc") and "--framework=5" in atc and "--model=model.onnx" in atc
    assert "--input_shape=x:1,3,24,32" in atc and "--soc_version=Ascend310P3" in atc
    assert "--precision_mode=allow_mix_precision" in atc
    assert {
        "--insert_op_conf=aipp.cfg",
        "--fusion_switch_file=fusion_switch.cfg",
        "--keep_dtype=keep_dtype.cfg",
    } <= set(atc)
    subprocess.run(["bash", "-n"], input=bundles.read(bundle, "build.sh").decode(), text=True, check=True)
    assert bundles.read(bundle, "keep_dtype.cfg").decode() == "softmax\n"
    switch = json.loads(bundles.read(bundle, "fusion_switch.cfg"))
    graph = switch["Switch"]["GraphFusion"]
    assert graph["ConvBatchnormFusionPass"] == "off" and graph["ConvScaleFusionPass"] == "off"
    assert graph["MatMulBiasAddFusionPass"] == "on"
    assert set(switch["Switch"]) <= {"GraphFusion", "UBFusion"}
    _parse_aipp(bundles.read(bundle, "aipp.cfg").decode())
    evaluate = CannBackend().stages["evaluate"].load()
    with pytest.raises(ToolchainMissing, match="atc not installed"):
        evaluate.run(_request(tmp_path, "evaluate", {"evaluate": {}}, out.artifacts))


def test_precision_modes_and_keep_dtype() -> None:
    from backends.cann.adapter import precision_mode

    assert precision_mode("none", {}, False) == "must_keep_origin_dtype"
    assert precision_mode("fp16", {}, False) == "force_fp16"
    assert precision_mode("fp16", {}, True) == "allow_mix_precision"
    assert precision_mode("ptq", {"precision_mode": "force_fp32"}, True) == "force_fp32"
    assert keep_dtype_lines([{"node": "b", "precision": "fp16"}, {"node": "a", "precision": "int16"}]) == [
        "b"
    ]
    assert fusion_switch({})["Switch"]["GraphFusion"]["ConvBatchnormFusionPass"] == "on"


def test_atc_runs_when_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ascend-toolkit" / "8.0.0"
    (root / "bin").mkdir(parents=True)
    atc = root / "bin" / "atc"
    atc.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        '[[ "$*" == *"--soc_version=Ascend310P3"* ]]; test -f fusion_switch.cfg; printf OM > out/model.om\n'
    )
    atc.chmod(atc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(root))
    assert CannBackend().fingerprint()["cann_toolkit"] == "8.0.0"
    out = CannCompile().run(
        _request(tmp_path, "compile", _compile_config(), {"model": _model(tmp_path / "m.onnx")})
    )
    assert out.report["tool_ran"] is True and out.artifacts["om"].read_bytes() == b"OM"
    atc.write_text("#!/bin/sh\necho 'E10001: bad option' >&2\nexit 1\n")
    with pytest.raises(TerminalError, match="atc failed"):
        CannCompile().run(
            _request(tmp_path, "compile", _compile_config(), {"model": _model(tmp_path / "m2.onnx")})
        )
