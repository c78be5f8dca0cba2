"""A small voice-activity-like model built here: an int64 scalar sample-rate input picks one of two LSTM
branches through an `If` (the shape of Silero VAD's graph), so the main graph alone shows three nodes
and no MACs while the work is in the branches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, BATCH, FEATURES = 8, 1, 16
HIDDEN = {"then_branch": 32, "else_branch": 24}


def _branch(name: str, hidden: int, rng: np.random.Generator) -> onnx.GraphProto:
    """LSTM over the outer-scope `x`, last hidden state -> linear -> sigmoid: a speech probability."""
    w = rng.normal(0, 0.2, (1, 4 * hidden, FEATURES)).astype(np.float32)
    r = rng.normal(0, 0.2, (1, 4 * hidden, hidden)).astype(np.float32)
    b = rng.normal(0, 0.1, (1, 8 * hidden)).astype(np.float32)
    head = rng.normal(0, 0.3, (hidden, 1)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, f"{name}_W"),
        numpy_helper.from_array(r, f"{name}_R"),
        numpy_helper.from_array(b, f"{name}_B"),
        numpy_helper.from_array(head, f"{name}_head"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), f"{name}_axes"),
    ]
    nodes = [
        helper.make_node(
            "LSTM",
            ["x", f"{name}_W", f"{name}_R", f"{name}_B"],
            ["", f"{name}_h"],
            hidden_size=hidden,
            name=f"{name}_lstm",
        ),
        helper.make_node("Squeeze", [f"{name}_h", f"{name}_axes"], [f"{name}_hs"], name=f"{name}_squeeze"),
        helper.make_node("MatMul", [f"{name}_hs", f"{name}_head"], [f"{name}_logit"], name=f"{name}_head"),
        helper.make_node("Sigmoid", [f"{name}_logit"], [f"{name}_prob"], name=f"{name}_sigmoid"),
    ]
    out = helper.make_tensor_value_info(f"{name}_prob", TensorProto.FLOAT, [BATCH, 1])
    return helper.make_graph(nodes, name, [], [out], inits)


def vad_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, FEATURES])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    prob = helper.make_tensor_value_info("prob", TensorProto.FLOAT, [BATCH, 1])
    nodes = [
        helper.make_node("Equal", ["sr", "rate16k"], ["is16k"], name="is16k"),
        helper.make_node(
            "If",
            ["is16k"],
            ["prob"],
            name="by_rate",
            then_branch=_branch("then_branch", HIDDEN["then_branch"], rng),
            else_branch=_branch("else_branch", HIDDEN["else_branch"], rng),
        ),
    ]
    rate = numpy_helper.from_array(np.array(16000, dtype=np.int64), "rate16k")
    graph = helper.make_graph(nodes, "vad", [x, sr], [prob], [rate])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def save_vad(path: Path) -> Path:
    onnx.save(vad_model(), str(path))
    return path
