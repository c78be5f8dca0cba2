"""The HTML page: a Jinja2 template, Plotly figures as <div>s, plotly.js inlined once (works offline)."""

from __future__ import annotations

from typing import Any

from reconciler.report import charts, graph
from reconciler.report.data import ReportData

VERDICT_CLASS = {"pass": "pass", "fail": "fail", "met on estimate": "estimate", "fail (estimated)": "fail"}


def _div(fig: Any, div_id: str) -> str:
    html: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False}
    )
    return html


def _sensitivity(data: ReportData) -> tuple[str | None, list[dict[str, Any]], str]:
    """(chart, kept layers, why there is no chart)."""
    if data.quantize is None:
        return None, [], f"quantization.mode is {data.quantization_mode}: nothing was quantized"
    kept = list(data.quantize.get("kept") or [])
    auto = data.quantize.get("auto") or {}
    table = auto.get("table") or []
    if not table:
        why = "no per-layer sensitivity was measured (set quantization.sensitive_layers.auto to rank layers)"
        return None, kept, why
    chosen = {str(c.get("layer")) for c in auto.get("chosen") or []}
    fig = charts.sensitivity(table, chosen, str(auto.get("metric", "accuracy")))
    return _div(fig, "sensitivity"), kept, ""


def html(data: ReportData) -> str:
    import jinja2
    from plotly.offline import get_plotlyjs

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reconciler.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    placement_div = _div(graph.figure(data.placement), "placement") if data.placement else None
    latency_div = _div(charts.latency(data.latency, data.verdicts), "latency") if data.latency else None
    history_fig = charts.history(data.history)
    sensitivity_div, kept, sensitivity_why = _sensitivity(data)
    template = env.get_template("report.html.j2")
    return template.render(
        d=data,
        verdict_class=VERDICT_CLASS,
        plotlyjs=get_plotlyjs(),
        placement_div=placement_div,
        latency_div=latency_div,
        history_div=_div(history_fig, "history") if history_fig is not None else None,
        sensitivity_div=sensitivity_div,
        sensitivity_why=sensitivity_why,
        kept=kept,
        colors=graph.COLORS,
    )
