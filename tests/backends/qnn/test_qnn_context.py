"""The EPContext model onnxruntime-qnn writes, read back: the context binaries it names."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from backends.qnn.stages import context_files


def _node(name: str, x: str, y: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node("EPContext", [x], [y], name=name, domain="com.microsoft", **attrs)


def test_a_graph_split_over_several_contexts_names_each_binary_once(tmp_path: Path) -> None:
    """Two partitions in one context: the main node names the file, the other runs a graph inside
    that context and names none (it has no ep_cache_context); a third, embedded, names none either."""
    nodes = [
        _node(
            "part0", "x", "a", embed_mode=0, main_context=1, ep_cache_context="model_ctx.bin", source="QNN"
        ),
        helper.make_node("Relu", ["a"], ["b"], name="on_cpu"),
        _node("part1", "b", "c", embed_mode=0, main_context=0, source="QNN"),
        _node("part2", "c", "y", embed_mode=1, main_context=1, ep_cache_context=b"\x00binary", source="QNN"),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    path = tmp_path / "model_ctx.onnx"
    onnx.save(model, str(path))
    assert context_files(path) == ["model_ctx.bin"]
