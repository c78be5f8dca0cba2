"""The placement graph: nodes by topological layer (left to right), coloured by device, partitions outlined.

Layers come from the longest path from a graph input, so a chain reads left to right and parallel
branches stack vertically. Each partition (a connected same-device subgraph the runtime executes as one
unit) gets a rounded outline in its device's colour around its nodes' bounding box.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from reconciler.report.data import Placement

COLORS = {"NPU": "#2ca02c", "CPU": "#ff7f0e"}
OTHER = "#7f7f7f"


def layout(names: list[str], edges: list[tuple[str, str]]) -> dict[str, tuple[float, float]]:
    """name -> (x, y): x is the longest-path layer, y the rank within the layer (centred)."""
    incoming: dict[str, list[str]] = defaultdict(list)
    for source, dest in edges:
        incoming[dest].append(source)
    layer: dict[str, int] = {}
    for name in names:  # placement lists nodes in graph (topological) order
        layer[name] = max((layer[s] + 1 for s in incoming[name] if s in layer), default=0)
    by_layer: dict[int, list[str]] = defaultdict(list)
    for name in names:
        by_layer[layer[name]].append(name)
    out = {}
    for x, members in by_layer.items():
        for i, name in enumerate(members):
            out[name] = (float(x), (len(members) - 1) / 2 - i)
    return out


def _partition_shapes(
    nodes: list[dict[str, Any]], pos: dict[str, tuple[float, float]]
) -> list[dict[str, Any]]:
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        groups[int(node.get("partition", -1))].append(node)
    shapes = []
    for pid, members in sorted(groups.items()):
        xs = [pos[str(m["name"])][0] for m in members]
        ys = [pos[str(m["name"])][1] for m in members]
        color = COLORS.get(str(members[0].get("device")), OTHER)
        shapes.append(
            {
                "type": "rect",
                "x0": min(xs) - 0.4,
                "x1": max(xs) + 0.4,
                "y0": min(ys) - 0.4,
                "y1": max(ys) + 0.4,
                "line": {"color": color, "width": 2, "dash": "dot"},
                "fillcolor": color,
                "opacity": 0.12,
                "layer": "below",
                "name": f"partition {pid}",
            }
        )
    return shapes


def figure(placement: Placement) -> Any:
    import plotly.graph_objects as go

    nodes = [n for n in placement.report.get("nodes", []) if n.get("name") is not None]
    names = [str(n["name"]) for n in nodes]
    pos = layout(names, placement.edges)
    fig = go.Figure()
    edge_x: list[float | None] = []
    edge_y: list[float | None] = []
    for source, dest in placement.edges:
        if source in pos and dest in pos:
            edge_x += [pos[source][0], pos[dest][0], None]
            edge_y += [pos[source][1], pos[dest][1], None]
    fig.add_trace(
        go.Scatter(
            x=edge_x,
            y=edge_y,
            mode="lines",
            line={"color": "#b0b0b0", "width": 1},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    for device in sorted({str(n.get("device")) for n in nodes}):
        members = [n for n in nodes if str(n.get("device")) == device]
        hover = [
            f"{n['name']}<br>{n.get('op_type', '?')} on {device}, partition {n.get('partition')}"
            + (f"<br>{'; '.join(map(str, n['failed']))}" if n.get("failed") else "")
            for n in members
        ]
        fig.add_trace(
            go.Scatter(
                x=[pos[str(n["name"])][0] for n in members],
                y=[pos[str(n["name"])][1] for n in members],
                mode="markers+text" if len(nodes) <= 60 else "markers",
                marker={
                    "size": 16,
                    "color": COLORS.get(device, OTHER),
                    "line": {"color": "#333", "width": 1},
                },
                text=[str(n.get("op_type", "")) for n in members],
                textposition="top center",
                hovertext=hover,
                hoverinfo="text",
                name=f"{device} ({len(members)} nodes)",
            )
        )
    width = max(pos.values(), key=lambda p: p[0])[0] if pos else 0
    fig.update_layout(
        shapes=_partition_shapes(nodes, pos),
        height=320 + 12 * min(40, len({p[1] for p in pos.values()})),
        margin={"l": 20, "r": 20, "t": 30, "b": 20},
        xaxis={"visible": False, "range": [-1, width + 1]},
        yaxis={"visible": False},
        plot_bgcolor="white",
        legend={"orientation": "h"},
        title={"text": f"placement ({placement.source} stage): {len(nodes)} nodes"},
    )
    return fig
