"""The layer phase's region search: the input-side prefix (compute layers with the glue between them),
the sizes it tries, and the smallest size that meets the budget; on a real residual CNN, the float
region restores the float output exactly over its span."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.passes.quant import region_search
from backends.passes.quant.sensitivity import Layer, Score


def _residual_cnn() -> onnx.ModelProto:
    """conv1+relu -> add1 (residual with x) -> conv2 -> add2 (residual with add1) -> conv3 -> y."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}")
        for i in (1, 2, 3)
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Add", ["r1", "x"], ["a1"], name="add1"),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "a1"], ["a2"], name="add2"),
        helper.make_node("Conv", ["a2", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_prefix_holds_the_glue_between_its_layers_and_up_to_the_next() -> None:
    model = _residual_cnn()
    one = region_search.prefix(model, 1, {})
    assert [x.nodes for x in one] == [("conv1", "relu1", "add1")]  # add1 feeds conv2: the region's edge
    two = region_search.prefix(model, 2, {})
    assert [x.name for x in two] == ["conv1", "conv2"]
    assert two[1].nodes == ("add1", "conv2", "add2")  # glue goes with the layer it feeds
    every = [n for x in region_search.prefix(model, 3, {}) for n in x.nodes]
    assert every == [n.name for n in model.graph.node]


def test_nodes_the_spec_places_itself_stay_out_of_the_region() -> None:
    region = region_search.prefix(_residual_cnn(), 2, {"add1": "int16"})
    assert [n for x in region for n in x.nodes] == ["conv1", "relu1", "conv2", "add2"]


@pytest.mark.parametrize(
    ("layers", "left", "expected"),
    [
        (23, 12, [2, 4, 8, 12]),
        (23, 8, [2, 4, 8]),
        (23, 40, [2, 4, 8, 16, 22]),
        (3, 12, [2]),
        (2, 8, [1]),
        (1, 8, []),
    ],
)
def test_sizes_double_up_to_the_budget_and_never_the_whole_model(
    layers: int, left: int, expected: list[int]
) -> None:
    assert region_search.sizes(layers, left) == expected


class _ByRegionSize:
    """Fake scorer: the score of a build is a function of the region's size (the build's file name);
    stands in for the task metric, which this test does not exercise."""

    metric = "fake"
    reference_accuracy = 1.0

    def __init__(self, accuracy: dict[int, float]) -> None:
        self.accuracy = accuracy
        self.scored: list[int] = []

    def __call__(self, path: Path) -> Score:
        size = int(path.name)
        self.scored.append(size)
        return Score(self.accuracy[size], 20.0 + size)


def _many_layers(count: int) -> onnx.ModelProto:
    """A chain of `count` 1x1 convs, each joined to the input by a residual Add."""
    w = numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w")
    nodes, prev = [], "x"
    for i in range(count):
        nodes.append(helper.make_node("Conv", [prev, "w"], [f"c{i}"], name=f"conv{i}"))
        nodes.append(helper.make_node("Add", [f"c{i}", "x"], [f"a{i}"], name=f"add{i}"))
        prev = f"a{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _build(tmp_path: Path):  # type: ignore[no-untyped-def]
    def build(region: list[Layer]) -> Path:
        return tmp_path / str(len(region))

    return build


def test_the_smallest_size_that_meets_the_budget_is_chosen(tmp_path: Path) -> None:
    model = _many_layers(20)
    scorer = _ByRegionSize({k: (0.99 if k >= 5 else 0.90) for k in range(1, 20)})
    found = region_search.search(model, {}, _build(tmp_path), scorer, 0.02, 12, lambda _m: None)  # type: ignore[arg-type]
    assert scorer.scored == [2, 4, 8, 6, 5]  # doubled past the budget, then bisected down
    assert found.budget_met and len(found.chosen) == 5 and found.step is not None
    assert found.step.accuracy == 0.99 and [t["layers"] for t in found.trials] == [2, 4, 8, 6, 5]


def test_without_a_size_that_meets_it_the_best_region_is_returned_unmet(tmp_path: Path) -> None:
    model = _many_layers(20)
    scorer = _ByRegionSize({2: 0.90, 4: 0.94, 8: 0.93, 12: 0.94})
    found = region_search.search(model, {}, _build(tmp_path), scorer, 0.02, 12, lambda _m: None)  # type: ignore[arg-type]
    assert scorer.scored == [2, 4, 8, 12]
    assert not found.budget_met and len(found.chosen) == 4  # 4 and 12 tie: the smaller region


def test_a_float_region_restores_the_float_output_over_its_span(tmp_path: Path) -> None:
    """On a real residual CNN quantized by ONNX Runtime, keeping the 2-layer prefix float (through
    backends.passes.quant.float_keep.without_layer, as the build does) leaves only the last conv rounded."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from backends.passes.quant.calibration import ChunkReader
    from backends.passes.quant.float_keep import without_layer

    model = _residual_cnn()
    src, qdq = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, src)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(8)]
    quantize_static(
        str(src), str(qdq), ChunkReader(feeds), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        extra_options={"QDQKeepRemovableActivations": True},  # as the build for a float region does
    )  # fmt: skip
    region = {n for x in region_search.prefix(model, 2, {}) for n in x.nodes}
    weights = {t.name: t for t in model.graph.initializer}
    kept = without_layer(onnx.load(str(qdq)), region, weights)

    def run(m: bytes | str, name: str) -> np.ndarray:
        s = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
        return np.asarray(s.run([name], feeds[0])[0])

    # the float a2 (input of conv3) as the partly-float model computes it vs the float model's
    probe = onnx.load(str(src))
    probe.graph.output.append(helper.make_tensor_value_info("a2", TensorProto.FLOAT, None))
    float_a2 = run(probe.SerializeToString(), "a2")
    kept_model = onnx.load_from_string(kept)
    kept_model.graph.output.append(helper.make_tensor_value_info("a2", TensorProto.FLOAT, None))
    assert np.abs(run(kept_model.SerializeToString(), "a2") - float_a2).max() < 1e-5
    y_float, y_qdq, y_kept = run(str(src), "y"), run(str(qdq), "y"), run(kept, "y")
    assert np.abs(y_kept - y_float).max() < np.abs(y_qdq - y_float).max()  # less rounding than all-int8
