"""The placement graph as inline SVG: readable at any model size.

A 440-node detector drawn node by node is a solid bar. What a user needs to see is where the model
leaves the NPU: so every NPU partition (a connected subgraph the runtime runs as one unit) is drawn as
one box, CPU fallback nodes are drawn one by one (they are what a rewrite removes), and every edge that
crosses devices is a boundary transfer, drawn red and counted. Models of at most SMALL nodes are drawn
node by node. Boxes are layered by longest path (a chain reads left to right, branches stack).
"""

from __future__ import annotations

from collections import Counter, defaultdict
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
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 40, 40, 16


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
    """name -> (x, y): x is the longest-path layer, y the rank within the layer (centred)."""
    incoming: dict[str, list[str]] = defaultdict(list)
    for source, dest in edges:
        incoming[dest].append(source)
    layer: dict[str, int] = {}
    for name in names:  # boxes come in graph (topological) order
        layer[name] = max((layer[s] + 1 for s in incoming[name] if s in layer), default=0)
    by_layer: dict[int, list[str]] = defaultdict(list)
    for name in names:
        by_layer[layer[name]].append(name)
    out = {}
    for x, members in by_layer.items():
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
    top = max(y for _, y in pos.values())
    xs = {k: x * (BOX_W + GAP_X) + 10 for k, (x, _) in pos.items()}
    ys = {k: (top - y) * (BOX_H + GAP_Y) + 10 for k, (_, y) in pos.items()}
    width = max(xs.values()) + BOX_W + 10
    height = max(ys.values()) + BOX_H + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#999"/></marker></defs>',
    ]
    for a, b, crossing in graph.edges:
        color, stroke = (TRANSFER, 2) if crossing else ("#b0b0b0", 1)
        parts.append(
            f'<line x1="{xs[a] + BOX_W:.0f}" y1="{ys[a] + BOX_H / 2:.0f}" x2="{xs[b]:.0f}" y2="{ys[b] + BOX_H / 2:.0f}" '
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
