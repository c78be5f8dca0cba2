"""Suggestions from a real profile: a CPU fallback that dominates is met first by the rewrite that
removes it, and once the rewrite is applied the profile shows that share gone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_helpers import compile_model

from backends import profiles
from backends.catalog import target
from backends.onnxruntime._evaluate import EvaluatePass
from backends.passes import estimate as E
from backends.passes import placement
from backends.passes.rewrite.stage import rewrite_model
from backends.profiles.attribution import attribute
from backends.profiles.suggest import suggest
from backends.sdk.base import StageRequest

PTQ = {"mode": "ptq", "weights": "int8"}


def _einsum_model(c: int = 8, hw: int = 64) -> onnx.ModelProto:
    """A channel mix written as an Einsum (how exporters emit `torch.einsum`) between two cheap NPU
    ops: RK3588's op table has no Einsum, so its 2 M MACs run on the CPU and take most of the time;
    the rewrite library turns it into Reshape/MatMul/Transpose, which the NPU runs."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array((rng.standard_normal([hw, hw]) / 8).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "half"], ["a"], name="pre/add"),
        helper.make_node("Einsum", ["a", "w"], ["e"], name="mix/einsum", equation="bchw,wk->bchk"),
        helper.make_node("Relu", ["e"], ["y"], name="post/relu"),
    ]
    shape = [1, c, hw, hw]
    graph = helper.make_graph(
        nodes,
        "einsum_mix",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _profile(tmp: Path, model: onnx.ModelProto) -> tuple[dict, dict]:
    """The model's real ORT profile on this host, attributed against RK3588's int8 placement."""
    tmp.mkdir()
    path = tmp / "model.onnx"
    onnx.save(model, str(path))
    compiled = compile_model(path, tmp / "compiled", level=1, cores=1)
    report = placement.compute(model, target("rk3588"), PTQ)
    (tmp / "placement.json").write_text(json.dumps(report))
    (tmp / "eval").mkdir()
    request = StageRequest(
        "evaluate",
        target("cpu"),
        {"target": "cpu", "evaluate": {"runner": "local", "warmup": 3, "runs": 20, "timeout_s": 300}},
        {**compiled.artifacts, "model": path, "float_model": path, "placement": tmp / "placement.json"},
        tmp / "eval",
        tmp / "eval.log",
    )
    out = EvaluatePass().run(request)
    profile = profiles.read(out.artifacts["profile"])
    profile["attribution"] = attribute(profile, target("rk3588"))
    return profile, report


def test_a_dominant_fallback_is_met_first_by_the_rewrite_and_is_gone_after_it(tmp_path: Path) -> None:
    model = _einsum_model()
    profile, report = _profile(tmp_path / "before", model)
    fallback = [layer for layer in profile["layers"] if layer["placement"] == "CPU"]
    assert fallback and all("mix/einsum" in layer["onnx_nodes"] for layer in fallback)
    share = sum(float(x["time_ms"]) for x in fallback) / sum(float(x["time_ms"]) for x in profile["layers"])
    assert profile["attribution"]["shares"]["cpu_fallback"] == round(share, 4)
    biggest = max(profile["layers"], key=lambda layer: float(layer["time_ms"]))
    assert biggest["placement"] == "CPU", "the fallback is the layer that costs most"
    assert share > 0.5, "and most of the model's time"
    found = suggest(profile, target("rk3588"), float_model=model, precision=report["precision"])
    assert found and found[0]["field"] == "rewrite.replace_unsupported"
    first = found[0]
    assert 0 < first["from_layers_ms"] <= sum(float(x["time_ms"]) for x in fallback)
    assert first["expected_gain_ms"] == pytest.approx(
        first["from_layers_ms"] + first["from_crossings_ms"], abs=1e-5
    )
    assert found[0]["evidence"].startswith("estimated")

    rewritten = rewrite_model(
        model, target("rk3588"), E.precision_for(target("rk3588"), PTQ), {}, log=lambda _: None
    ).model
    after, _ = _profile(tmp_path / "after", rewritten)
    assert after["attribution"]["shares"]["cpu_fallback"] == 0.0
    assert not [layer for layer in after["layers"] if layer["placement"] == "CPU"]
    assert not [
        s for s in suggest(after, target("rk3588"), float_model=rewritten) if s["field"].startswith("rewrite")
    ]
