"""The placement graph on its own: layering, device colours, collapsed partitions, boundary transfers."""

from __future__ import annotations

import re
from itertools import pairwise

from reconciler.report.data import Placement
from reconciler.report.graph import BOX_W, COLORS, SMALL, TRANSFER, collapse, layout, svg

NODES = [
    {"name": "conv", "op_type": "Conv", "device": "NPU", "partition": 0},
    {"name": "relu", "op_type": "Relu", "device": "NPU", "partition": 0},
    {"name": "topk", "op_type": "TopK", "device": "CPU", "partition": 1, "failed": ["k must be constant"]},
    {"name": "side", "op_type": "Sigmoid", "device": "NPU", "partition": 2},
    {"name": "add", "op_type": "Add", "device": "NPU", "partition": 2},
]
EDGES = [("conv", "relu"), ("relu", "topk"), ("relu", "side"), ("topk", "add"), ("side", "add")]


def test_layout_layers_by_longest_path() -> None:
    pos = layout([str(n["name"]) for n in NODES], EDGES)
    assert [pos[n][0] for n in ("conv", "relu", "topk", "side", "add")] == [0, 1, 2, 2, 3]
    assert pos["topk"][1] != pos["side"][1], "parallel branches stack vertically"


def test_a_small_model_is_drawn_node_by_node_with_its_transfers() -> None:
    markup, graph = svg(Placement({"nodes": NODES}, EDGES, "check"))
    assert [b.id for b in graph.boxes] == ["conv", "relu", "topk", "side", "add"]
    assert graph.transfers == 2, "relu -> topk and topk -> add cross devices"
    assert markup.count('<g class="box"') == 5
    assert markup.count(f'stroke="{TRANSFER}"') == 2
    assert f'fill="{COLORS["CPU"]}"' in markup and "k must be constant" in markup


def _big(npu_runs: int, run: int) -> tuple[list[dict[str, object]], list[tuple[str, str]]]:
    """A chain of `npu_runs` NPU partitions of `run` nodes each, with one CPU fallback between each pair."""
    nodes: list[dict[str, object]] = []
    pid = 0
    for r in range(npu_runs):
        nodes += [
            {"name": f"n{r}_{i}", "op_type": "Conv", "device": "NPU", "partition": pid} for i in range(run)
        ]
        pid += 1
        if r < npu_runs - 1:
            nodes.append(
                {"name": f"cpu{r}", "op_type": "NonMaxSuppression", "device": "CPU", "partition": pid}
            )
            pid += 1
    names = [str(n["name"]) for n in nodes]
    return nodes, list(pairwise(names))


def test_a_large_model_collapses_npu_partitions_and_keeps_every_fallback_visible() -> None:
    nodes, edges = _big(npu_runs=4, run=110)  # 443 nodes: once a solid green bar
    assert len(nodes) > SMALL
    markup, graph = svg(Placement({"nodes": nodes}, edges, "rewrite"))
    assert [b.label for b in graph.boxes] == [
        "NPU partition 0",
        "NonMaxSuppression",
        "NPU partition 2",
        "NonMaxSuppression",
        "NPU partition 4",
        "NonMaxSuppression",
        "NPU partition 6",
    ]
    assert graph.transfers == 6, "into and out of each of the 3 fallbacks"
    assert "110 nodes (Conv×110)" in graph.boxes[0].detail
    width = int(re.search(r'width="(\d+)"', markup).group(1))  # type: ignore[union-attr]
    assert width < 2000, "seven boxes in a row, not 443 nodes"


def test_a_cpu_only_model_is_one_box() -> None:
    nodes = [{"name": f"n{i}", "op_type": "Conv", "device": "CPU", "partition": 0} for i in range(100)]
    graph = collapse(nodes, [(f"n{i}", f"n{i + 1}") for i in range(99)])
    assert len(graph.boxes) == 1 and graph.transfers == 0


def test_no_edges_still_draws_every_node_and_names_are_escaped() -> None:
    nodes = [*NODES, {"name": "</script><b>x", "op_type": "<Op>", "device": "CPU", "partition": 3}]
    markup, graph = svg(Placement({"nodes": nodes}, [], "rewrite"))
    assert len(graph.boxes) == len(nodes) and graph.edges == []
    assert "</script>" not in markup and "&lt;Op&gt;" in markup


def test_a_thirty_partition_chain_grows_down_the_page_and_fits_its_frame() -> None:
    nodes, edges = _big(npu_runs=15, run=50)  # 15 NPU partitions and 14 fallbacks: 29 boxes in a chain
    markup, graph = svg(Placement({"nodes": nodes}, edges, "check"))
    assert len(graph.boxes) == 29
    svg_tag = re.search(r"<svg [^>]*>", markup).group(0)  # type: ignore[union-attr]
    width, height = (int(re.search(rf'{a}="(\d+)"', svg_tag).group(1)) for a in ("width", "height"))  # type: ignore[union-attr]
    assert width < 2 * BOX_W < height, "one box wide, 29 layers tall: never a horizontal strip"
    assert f'viewBox="0 0 {width} {height}"' in svg_tag and "preserveAspectRatio" in svg_tag
    assert 'class="placement"' in svg_tag, "the page's fit and zoom controls address it"


def test_a_branch_is_ordered_under_its_parent() -> None:
    # two chains side by side: each layer's boxes keep their parent's order (no crossing edges)
    names = ["a", "b", "b1", "a1", "b2", "a2"]  # graph order puts b1 first: the barycentre puts a1 under a
    edges = [("a", "a1"), ("b", "b1"), ("b1", "b2"), ("a1", "a2")]
    pos = layout(names, edges)
    for parent, child in edges:
        assert pos[parent][1] == pos[child][1], (parent, child, pos)
