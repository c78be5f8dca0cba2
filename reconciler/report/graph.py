"""The placement graph as inline SVG: readable at any model size, fitted to the page and zoomable.

A 440-node detector drawn node by node is a solid bar. What a user needs to see is where the model
leaves the NPU: so every NPU partition (a connected subgraph the runtime runs as one unit) is drawn as
one box, CPU fallback nodes are drawn one by one (they are what a rewrite removes), and every edge that
crosses devices is a boundary transfer, drawn red and counted. Models of at most SMALL nodes are drawn
node by node.

The layout is layered (Sugiyama's scheme): networkx layers the box graph by longest path
(`topological_generations`), each layer is ordered by the barycentre of its predecessors (fewer
crossings), and layers run top to bottom, so a long chain grows down the page, never into a strip
wider than it. The SVG carries a viewBox and no fixed size on the page: it fits its frame, and the
page's zoom buttons scale it (reconciler/report/templates).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from html import escape
from typing import Any

from reconciler.report.data import Placement

COLORS = {"NPU": "#2ca02c", "CPU": "#ff7f0e"}
OTHER = "#7f7f7f"
TRANSFER = "#d62728"
SMALL = 40
"""Up to this many nodes, every node is its own box."""
CPU_RUN = 8
"""A CPU partition of more nodes than this is collapsed too (a CPU-only target is one box)."""
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 40, 24, 28


@dataclass
class Box:
    id: str
    device: str
    label: str
    members: list[dict[str, Any]] = field(default_factory=list)

    @property
    def detail(self) -> str:
        if len(self.members) == 1:
            node = self.members[0]
            why = "; ".join(map(str, node.get("failed") or []))
            return f"{node.get('name')}: {node.get('op_type', '?')} on {self.device}" + (
                f" ({why})" if why else ""
            )
        ops = Counter(str(n.get("op_type", "?")) for n in self.members)
        top = ", ".join(f"{op}×{n}" for op, n in ops.most_common(6))
        return f"{self.label} on {self.device}: {len(self.members)} nodes ({top})"


@dataclass
class Graph:
    boxes: list[Box]
    edges: list[tuple[str, str, bool]]
    """(from box, to box, crosses devices)"""

    @property
    def transfers(self) -> int:
        return sum(1 for *_, crossing in self.edges if crossing)


def collapse(nodes: list[dict[str, Any]], edges: list[tuple[str, str]]) -> Graph:
    """Boxes in graph order (by each box's first node) and the deduplicated edges between them."""
    partition_size = Counter(int(n.get("partition", -1)) for n in nodes)
    box_of: dict[str, str] = {}
    boxes: dict[str, Box] = {}
    for node in nodes:
        device, pid = str(node.get("device")), int(node.get("partition", -1))
        whole = len(nodes) > SMALL and (device != "CPU" or partition_size[pid] > CPU_RUN)
        box_id = f"partition {pid}" if whole else str(node["name"])
        label = f"{device} partition {pid}" if whole else str(node.get("op_type", "?"))
        boxes.setdefault(box_id, Box(box_id, device, label)).members.append(node)
        box_of[str(node["name"])] = box_id
    linked: set[tuple[str, str, bool]] = set()
    for source, dest in edges:
        a, b = box_of.get(source), box_of.get(dest)
        if a is not None and b is not None and a != b:
            linked.add((a, b, boxes[a].device != boxes[b].device))
    return Graph(list(boxes.values()), sorted(linked))


def layout(names: list[str], edges: list[tuple[str, str]]) -> dict[str, tuple[float, float]]:
    """name -> (layer, rank): the layer is the longest path from a source, the rank the place within
    the layer (centred on 0), ordered by the mean rank of the box's predecessors. `names` come in graph
    (topological) order; an edge against it (a cycle made by collapsing partitions) is not laid out."""
    import networkx as nx

    order = {name: i for i, name in enumerate(names)}
    dag = nx.DiGraph()
    dag.add_nodes_from(names)
    dag.add_edges_from((a, b) for a, b in edges if a in order and b in order and order[a] < order[b])
    out: dict[str, tuple[float, float]] = {}
    for x, generation in enumerate(nx.topological_generations(dag)):

        def barycentre(name: str) -> tuple[float, int]:
            ranks = [out[p][1] for p in dag.predecessors(name)]
            return (-sum(ranks) / len(ranks) if ranks else 0.0, order[name])

        members = sorted(generation, key=barycentre)
        for i, name in enumerate(members):
            out[name] = (float(x), (len(members) - 1) / 2 - i)
    return out


def svg(placement: Placement) -> tuple[str, Graph]:
    """The SVG markup and the collapsed graph it draws."""
    nodes = [n for n in placement.report.get("nodes", []) if n.get("name") is not None]
    graph = collapse(nodes, placement.edges)
    pos = layout([b.id for b in graph.boxes], [(a, b) for a, b, _ in graph.edges])
    if not pos:
        return "", graph
    # layers top to bottom, ranks left to right
    top = max(y for _, y in pos.values())
    xs = {k: (top - y) * (BOX_W + GAP_X) + 10 for k, (_, y) in pos.items()}
    ys = {k: x * (BOX_H + GAP_Y) + 10 for k, (x, _) in pos.items()}
    width = max(xs.values()) + BOX_W + 10
    height = max(ys.values()) + BOX_H + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="placement" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" preserveAspectRatio="xMidYMin meet" '
        f'font-family="sans-serif" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#999"/></marker></defs>',
    ]
    for a, b, crossing in graph.edges:
        color, stroke = (TRANSFER, 2) if crossing else ("#b0b0b0", 1)
        parts.append(
            f'<line x1="{xs[a] + BOX_W / 2:.0f}" y1="{ys[a] + BOX_H:.0f}" x2="{xs[b] + BOX_W / 2:.0f}" y2="{ys[b]:.0f}" '
            f'stroke="{color}" stroke-width="{stroke}" marker-end="url(#arrow)">'
            f"<title>{'boundary transfer: ' if crossing else ''}{escape(a)} → {escape(b)}</title></line>"
        )
    for box in graph.boxes:
        color = COLORS.get(box.device, OTHER)
        count = f" · {len(box.members)}" if len(box.members) > 1 else ""
        parts.append(
            f'<g class="box" data-device="{escape(box.device)}"><title>{escape(box.detail)}</title>'
            f'<rect x="{xs[box.id]:.0f}" y="{ys[box.id]:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
            f'fill="{color}" fill-opacity="0.18" stroke="{color}" stroke-width="2"/>'
            f'<text x="{xs[box.id] + BOX_W / 2:.0f}" y="{ys[box.id] + BOX_H / 2 + 4:.0f}" text-anchor="middle">'
            f"{escape(box.label[:24])}{count}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts), graph
