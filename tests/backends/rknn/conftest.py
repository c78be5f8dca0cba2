"""Small real models and a stage-request helper for the RKNN tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends import toolchains
from backends.base import StageRequest
from backends.catalog import Target, targets

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"


def conv_model(path: Path, channels: int = 3, size: int = 16, gather_input: bool = False) -> Path:
    """Conv(3x3) -> Relu -> Conv -> GlobalAveragePool -> Flatten: a tiny real CNN with 8 classes.
    `gather_input` also feeds the input to an Add, so a channel swap cannot be folded into weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, channels, 3, 3)) * 0.3).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "B1"),
        numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "W2"),
        numpy_helper.from_array(np.zeros(8, np.float32), "B2"),
    ]
    first = "x"
    nodes = []
    if gather_input:
        inits.append(numpy_helper.from_array(np.ones((1, channels, 1, 1), np.float32), "one"))
        nodes.append(helper.make_node("Add", ["x", "one"], ["x1"], name="add_in"))
        first = "x1"
    nodes += [
        helper.make_node("Conv", [first, "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    return conv_model(tmp_path / "tiny.onnx")


@pytest.fixture
def calib_folder(tmp_path: Path) -> Path:
    """8 raw 16x16 RGB frames as uint8 NHWC .npy (what an application feeds)."""
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(8):
        np.save(folder / f"{i:04d}.npy", rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8))
    return folder


Request = Callable[..., StageRequest]


@pytest.fixture
def make_request(tmp_path: Path) -> Request:
    counter = {"n": 0}

    def make(
        stage: str, config: dict[str, Any], inputs: dict[str, Path], target: Target | None = None
    ) -> StageRequest:
        counter["n"] += 1
        work = tmp_path / f"work-{stage}-{counter['n']}"
        work.mkdir()
        return StageRequest(
            stage, target or targets()["rk3588"], config, inputs, work, work.parent / f"{work.name}.log"
        )

    return make


needs_rknn = pytest.mark.skipif(
    toolchains.python(toolchains.RKNN) is None,
    reason="rknn venv missing: run `npuctl toolchain install rknn`",
)
