"""Plotly figures for the report: latency distribution, quantization sensitivity, SLO history."""

from __future__ import annotations

from typing import Any

from reconciler.audit.entries import AuditEntry

PASS, FAIL, OTHER = "#2ca02c", "#d62728", "#7f7f7f"


def latency(per_variant: dict[str, dict[str, Any]], verdicts: list[dict[str, Any]]) -> Any:
    """Histogram of evaluate's raw timed runs per variant, with the latency SLO bounds as lines."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for variant, data in per_variant.items():
        fig.add_trace(
            go.Histogram(x=data["samples"], name=f"{variant} ({len(data['samples'])} runs)", opacity=0.75)
        )
    largest = max((max(d["samples"]) for d in per_variant.values() if d.get("samples")), default=0.0)
    off_scale = []
    for v in verdicts:
        if not str(v.get("name", "")).startswith("latency_ms.") or v.get("threshold") is None:
            continue
        if v["threshold"] <= 3 * largest:  # a bound far right of every sample would crush the histogram
            fig.add_vline(
                x=v["threshold"],
                line={"color": FAIL, "dash": "dash"},
                annotation_text=f"{v['name']} SLO ≤ {v['threshold']}",
            )
        else:
            off_scale.append(f"{v['name']} ≤ {v['threshold']} ms")
    title = "latency distribution" + (f" (SLO bounds off scale: {', '.join(off_scale)})" if off_scale else "")
    fig.update_layout(
        barmode="overlay",
        height=360,
        margin={"l": 40, "r": 20, "t": 30, "b": 40},
        xaxis_title="latency per run (ms)",
        yaxis_title="runs",
        title={"text": title},
    )
    return fig


def sensitivity(table: list[dict[str, Any]], chosen: set[str], metric: str) -> Any:
    """Per layer, what keeping it in float gains: task metric (left) and SQNR in dB (right), ranked."""
    from plotly.subplots import make_subplots

    rows = table[:40]
    labels = [f"{r.get('layer')} ({r.get('op_type', '?')})" for r in rows]
    colors = [FAIL if r.get("layer") in chosen else "#1f77b4" for r in rows]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[f"{metric} gained", "SQNR gained (dB)"],
    )
    fig.add_bar(
        x=[float(r.get("accuracy_gain") or 0.0) for r in rows],
        y=labels,
        orientation="h",
        marker={"color": colors},
        showlegend=False,
        row=1,
        col=1,
    )
    fig.add_bar(
        x=[float(r.get("sqnr_gain_db") or 0.0) for r in rows],
        y=labels,
        orientation="h",
        marker={"color": colors},
        showlegend=False,
        row=1,
        col=2,
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(
        height=180 + 24 * len(rows),
        margin={"l": 20, "r": 20, "t": 60, "b": 40},
        title={
            "text": "per-layer quantization sensitivity: gain when the layer is kept in float (red: kept)"
        },
    )
    return fig


def history(entries: list[AuditEntry]) -> Any | None:
    """One panel per SLO: its value over the lock file's history (oldest first), threshold dashed, verdict coloured."""
    from plotly.subplots import make_subplots

    if not entries:
        return None
    labels = [f"{e.label}<br>{e.time.strftime('%m-%d %H:%M')}" for e in entries]
    names = sorted(
        {str(v["name"]) for e in entries for v in e.verdicts if v.get("variant") in (None, "default")}
    )
    if not names:
        return None
    fig = make_subplots(
        rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names, vertical_spacing=0.08
    )
    for row, name in enumerate(names, start=1):
        points = [_point(e, name) for e in entries]
        colors = [
            PASS if p and p.get("passed") is True else FAIL if p and p.get("passed") is False else OTHER
            for p in points
        ]
        fig.add_scatter(
            x=labels,
            y=[p.get("value") if p else None for p in points],
            mode="lines+markers",
            name=name,
            marker={"size": 10, "color": colors},
            line={"color": "#1f77b4"},
            showlegend=False,
            row=row,
            col=1,
            hovertext=[
                f"{p.get('value')} {p.get('comparison')} {p.get('threshold')} ({p.get('evidence')})"
                if p
                else ""
                for p in points
            ],
        )
        fig.add_scatter(
            x=labels,
            y=[p.get("threshold") if p else None for p in points],
            mode="lines",
            name=f"{name} SLO",
            line={"color": FAIL, "dash": "dash", "shape": "hv"},
            showlegend=False,
            row=row,
            col=1,
        )
        if _wide_positive([p.get(k) for p in points if p for k in ("value", "threshold")]):
            fig.update_yaxes(type="log", row=row, col=1)
    fig.update_layout(
        height=140 + 170 * len(names),
        margin={"l": 50, "r": 20, "t": 40, "b": 60},
        title={"text": "SLOs over the lock file's history (green pass, red fail, dashed: threshold)"},
    )
    return fig


def _wide_positive(values: list[Any]) -> bool:
    """Values spanning more than 20x (a 0.04 ms latency under a 1000 ms bound): a log axis shows both."""
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) > 20


def _point(entry: AuditEntry, name: str) -> dict[str, Any] | None:
    return next(
        (v for v in entry.verdicts if v["name"] == name and v.get("variant") in (None, "default")), None
    )
