"""The placement graph on its own: layering, device colours, partition outlines."""

from __future__ import annotations

from reconciler.report.data import Placement
from reconciler.report.graph import COLORS, figure, layout

NODES = [
    {"name": "conv", "op_type": "Conv", "device": "NPU", "partition": 0},
    {"name": "relu", "op_type": "Relu", "device": "NPU", "partition": 0},
    {"name": "topk", "op_type": "TopK", "device": "CPU", "partition": 1, "failed": ["k must be constant"]},
    {"name": "side", "op_type": "Sigmoid", "device": "NPU", "partition": 2},
    {"name": "add", "op_type": "Add", "device": "NPU", "partition": 2},
]
EDGES = [("conv", "relu"), ("relu", "topk"), ("relu", "side"), ("topk", "add"), ("side", "add")]


def test_layout_layers_by_longest_path() -> None:
    pos = layout([n["name"] for n in NODES], EDGES)
    assert [pos[n][0] for n in ("conv", "relu", "topk", "side", "add")] == [0, 1, 2, 2, 3]
    assert pos["topk"][1] != pos["side"][1], "parallel branches stack vertically"


def test_figure_colours_devices_and_outlines_partitions() -> None:
    fig = figure(Placement({"nodes": NODES}, EDGES, "check"))
    traces = {t.name: t for t in fig.data if t.name}
    assert traces["NPU (4 nodes)"].marker.color == COLORS["NPU"]
    assert traces["CPU (1 nodes)"].marker.color == COLORS["CPU"]
    assert "k must be constant" in traces["CPU (1 nodes)"].hovertext[0]
    shapes = fig.layout.shapes
    assert [s.name for s in shapes] == ["partition 0", "partition 1", "partition 2"]
    assert [s.line.color for s in shapes] == [COLORS["NPU"], COLORS["CPU"], COLORS["NPU"]]
    cpu = shapes[1]
    assert cpu.x0 < 2 < cpu.x1, "the CPU partition's outline surrounds its node"
    edges = next(t for t in fig.data if t.mode == "lines")
    assert len([x for x in edges.x if x is None]) == len(EDGES)


def test_no_edges_still_draws_every_node() -> None:
    fig = figure(Placement({"nodes": NODES}, [], "rewrite"))
    assert sum(len(t.x) for t in fig.data if t.mode != "lines") == len(NODES)
