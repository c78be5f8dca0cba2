"""Names for onnx2tf on real exports: PP-OCR's classifier (Paddle2ONNX writes `Softmax@0`) and CenterFace
(`torch.onnx.export`: input `input.1`, outputs `537`...) renamed into TF's alphabets, computing the
same, with every input, output and node mapped back."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx

from backends.passes.rewrite.verify import run_model
from backends.tflite.names import sanitize
from backends.tflite.prepare import channels_last_inputs
from tests.backends.face_models import centerface
from tests.backends.passes.npu_models import imported

SCOPE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_./-]*")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check(model: onnx.ModelProto, feed_shape: list[int]) -> None:
    before = onnx.ModelProto()
    before.CopyFrom(model)
    renamed = sanitize(model)
    assert all(SCOPE.fullmatch(n.name) for n in model.graph.node)
    assert all(SCOPE.fullmatch(t) for n in model.graph.node for t in (*n.input, *n.output) if t)
    new_in = model.graph.input[0].name
    assert IDENT.fullmatch(new_in) and all(IDENT.fullmatch(o.name) for o in model.graph.output)
    old_in = before.graph.input[0].name
    assert renamed.original(new_in) == old_in
    assert [renamed.original(o.name) for o in model.graph.output] == [o.name for o in before.graph.output]
    assert {renamed.original(n.name) for n in model.graph.node} <= {n.name for n in before.graph.node} | {
        f"{n.op_type}_{k}" for k, n in enumerate(before.graph.node)
    }
    x = np.random.default_rng(0).uniform(-1, 1, feed_shape).astype(np.float32)
    for a, b in zip(run_model(before, {old_in: x}), run_model(model, {new_in: x}), strict=True):
        assert np.array_equal(a, b)


def test_paddle_at_names_are_renamed_and_map_back() -> None:
    model = imported("cls")
    assert sum("@" in n.name for n in model.graph.node) > 100
    _check(model, [1, 3, 48, 192])


def test_torch_default_names_are_renamed_and_map_back(tmp_path: Path) -> None:
    model = onnx.load(str(centerface(tmp_path)))
    assert model.graph.input[0].name == "input.1"
    _check(model, [1, 3, 64, 64])
    assert channels_last_inputs(model) == []  # NCHW: onnx2tf may lay it out channels-last
