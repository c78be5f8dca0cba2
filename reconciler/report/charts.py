"""Chart.js configurations for the report: latency distribution, quantization sensitivity, SLO history,
time by layer.

Each function returns a plain JSON-able dict (`{"type", "data", "options"}`) that the page hands to
Chart.js (vendored under static/, 210 KB, so a page stays far below 1 MB and works offline). Returning
data rather than markup keeps the charts testable: a test reads the points a chart will draw.
"""

from __future__ import annotations

from typing import Any

from reconciler.audit.entries import AuditEntry
from reconciler.records.judged import Judged

PASS, FAIL, OTHER, BLUE = "#2ca02c", "#d62728", "#7f7f7f", "#1f77b4"
PALETTE = (BLUE, "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


def _title(text: str) -> dict[str, Any]:
    return {"display": True, "text": text}


def latency(per_variant: dict[str, dict[str, Any]], verdicts: list[Judged]) -> dict[str, Any]:
    """Histogram of evaluate's raw timed runs per variant (shared bins), latency SLO bounds as lines."""
    import numpy as np

    everything = [float(s) for d in per_variant.values() for s in d.get("samples") or []]
    edges = np.histogram_bin_edges(everything, bins=min(40, max(5, len(everything) // 3)))
    width = float(edges[1] - edges[0]) if len(edges) > 1 else 1.0
    datasets: list[dict[str, Any]] = []
    for i, (variant, data) in enumerate(per_variant.items()):
        counts, _ = np.histogram([float(s) for s in data.get("samples") or []], bins=edges)
        datasets.append(
            {
                "type": "bar",
                "label": f"{variant} ({len(data.get('samples') or [])} runs)",
                "data": [
                    {"x": float(x) + width / 2, "y": int(c)} for x, c in zip(edges[:-1], counts, strict=True)
                ],
                "backgroundColor": PALETTE[i % len(PALETTE)] + "b0",
                "barPercentage": 1.0,
                "categoryPercentage": 1.0,
            }
        )
    tallest = max((p["y"] for d in datasets for p in d["data"]), default=1)
    largest = max(everything, default=0.0)
    off_scale = []
    for v in verdicts:
        if not v.name.startswith("latency_ms."):
            continue
        bound = float(v.threshold)
        if bound <= 3 * largest:  # a bound far right of every sample would crush the histogram
            datasets.append(
                {
                    "type": "line",
                    "label": f"{v.name} SLO ≤ {bound:g} ms",
                    "data": [{"x": bound, "y": 0}, {"x": bound, "y": tallest}],
                    "borderColor": FAIL,
                    "borderDash": [6, 4],
                    "pointRadius": 0,
                }
            )
        else:
            off_scale.append(f"{v.name} ≤ {bound:g} ms")
    title = "latency distribution" + (f" (SLO bounds off scale: {', '.join(off_scale)})" if off_scale else "")
    return {
        "type": "bar",
        "data": {"datasets": datasets},
        "options": {
            "plugins": {"title": _title(title)},
            "scales": {
                "x": {"type": "linear", "title": {"display": True, "text": "latency per run (ms)"}},
                "y": {"beginAtZero": True, "title": {"display": True, "text": "runs"}},
            },
        },
    }


def sensitivity(table: list[dict[str, Any]], chosen: set[str], metric: str) -> list[dict[str, Any]]:
    """Two ranked bar charts (most sensitive first); kept in red, lower means more sensitive. A point
    table (every quantization point): the rounding SQNR of each point (the cheap signal) and the task
    metric with it kept float where the search measured it. A layer table (older records): the task
    metric and output SQNR of the float model with only that layer quantized."""
    rows = table[:40]
    points = bool(rows) and "sqnr_db" in rows[0]
    labels = [f"{r.get('layer')} ({r.get('op_type', '?')})" for r in rows]
    colors = [FAIL if r.get("layer") in chosen else BLUE for r in rows]

    def bars(key: str, label: str) -> dict[str, Any]:
        return {
            "type": "bar",
            "data": {
                "labels": labels,
                "datasets": [
                    {
                        "label": label,
                        "data": [float(r.get(key) or 0.0) for r in rows],
                        "backgroundColor": colors,
                    }
                ],
            },
            "options": {
                "indexAxis": "y",
                "plugins": {
                    "title": _title(f"{label} (red: kept in float)"),
                    "legend": {"display": False},
                },
            },
            "height": 120 + 22 * len(rows),
        }

    if points:
        return [
            bars("kept_accuracy", f"{metric} with this point kept float (0: not measured)"),
            bars("sqnr_db", "rounding SQNR of the point (dB, cheap signal)"),
        ]
    return [
        bars("alone_accuracy", f"{metric}, with only this layer quantized"),
        bars("alone_sqnr_db", "output SQNR (dB), with only this layer quantized"),
    ]


def history(entries: list[AuditEntry]) -> list[dict[str, Any]]:
    """One line chart per SLO: its value over the lock file's history (oldest first), threshold dashed
    and stepped, each point coloured by its verdict."""
    labels = [f"{e.label} {e.time.strftime('%m-%d %H:%M')}" for e in entries]
    names = sorted({v.name for e in entries for v in e.verdicts if v.variant in ("", "default")})
    charts = []
    for name in names:
        points = [_point(e, name) for e in entries]
        colors = [
            PASS if p and p.passed is True else FAIL if p and p.passed is False else OTHER for p in points
        ]
        values = [p.value if p else None for p in points]
        thresholds = [p.threshold if p else None for p in points]
        log = _wide_positive([*values, *thresholds])
        charts.append(
            {
                "type": "line",
                "data": {
                    "labels": labels,
                    "datasets": [
                        {
                            "label": name,
                            "data": values,
                            "borderColor": BLUE,
                            "pointBackgroundColor": colors,
                            "pointRadius": 6,
                            "spanGaps": True,
                        },
                        {
                            "label": f"{name} SLO",
                            "data": thresholds,
                            "borderColor": FAIL,
                            "borderDash": [6, 4],
                            "stepped": True,
                            "pointRadius": 0,
                        },
                    ],
                },
                "options": {
                    "plugins": {"title": _title(name)},
                    "scales": {"y": {"type": "logarithmic" if log else "linear"}},
                },
                "height": 200,
            }
        )
    return charts


def _wide_positive(values: list[Any]) -> bool:
    """Values spanning more than 20x (a 0.04 ms latency under a 1000 ms bound): a log axis shows both."""
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) > 20


def _point(entry: AuditEntry, name: str) -> Judged | None:
    return next((v for v in entry.verdicts if v.name == name and v.variant in ("", "default")), None)


DEVICE_COLORS = {"NPU": BLUE, "CPU": FAIL}
LAYERS_SHOWN = 40


def layers(profile: dict[str, Any]) -> dict[str, Any]:
    """Time by layer (the slowest LAYERS_SHOWN), one bar each, coloured by where the target runs it:
    the placement's device where the target has one, else the device that ran it."""
    rows = sorted(profile.get("layers") or [], key=lambda layer: -float(layer["time_ms"]))[:LAYERS_SHOWN]
    labels, colors = [], []
    for layer in rows:
        nodes = layer.get("onnx_nodes") or []
        labels.append(f"{nodes[0] if nodes else layer['name']} ({layer.get('op_type')})")
        device = str(layer.get("placement") or layer.get("device") or "")
        colors.append(DEVICE_COLORS.get(device.split("/")[0], OTHER))
    return {
        "type": "bar",
        "data": {
            "labels": labels,
            "datasets": [
                {
                    "label": "time per run (ms)",
                    "data": [float(layer["time_ms"]) for layer in rows],
                    "backgroundColor": colors,
                }
            ],
        },
        "options": {
            "indexAxis": "y",
            "plugins": {
                "title": _title(
                    f"time by layer, {profile.get('runtime')} ({profile.get('evidence')}); "
                    "blue: NPU, red: CPU, grey: runtime's own"
                ),
                "legend": {"display": False},
            },
        },
        "height": 120 + 22 * len(rows),
    }


def points(config: dict[str, Any]) -> int:
    """How many data points a chart draws (tests assert every chart has some)."""
    return sum(1 for d in config["data"]["datasets"] for p in d["data"] if p is not None)
