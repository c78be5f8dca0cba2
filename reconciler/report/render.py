"""The HTML page: a Jinja2 template, inline SVG for the placement graph, Chart.js configs as JSON.

Chart.js (MIT, vendored under static/) is inlined once, so the page works offline and stays small.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from backends.sdk.vocab import NODES_THAT_RUN, OP_TABLE, Verdict
from reconciler.report import charts, graph
from reconciler.report.data import Placement, ReportData

VERDICT_CLASS = {v.word: v.tone.css for v in Verdict}
"""Verdict word -> the page's class for it (the tone: good, bad, unsure)."""


def chartjs() -> str:
    return files("reconciler.report").joinpath("static/chart.umd.min.js").read_text(encoding="utf-8")


def chart_configs(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    """Section -> the Chart.js configs it shows (empty when the section has no data)."""
    out: dict[str, list[dict[str, Any]]] = {"latency": [], "history": [], "sensitivity": [], "profile": []}
    if data.profile and data.profile.get("layers"):
        out["profile"] = [charts.layers(data.profile)]
    if data.latency:
        out["latency"] = [charts.latency(data.latency, data.verdicts)]
    if data.history:
        out["history"] = charts.history(data.history)
    table, chosen, metric = _sensitivity_table(data)
    if table:
        out["sensitivity"] = charts.sensitivity(table, chosen, metric)
    return out


def _sensitivity_table(data: ReportData) -> tuple[list[dict[str, Any]], set[str], str]:
    auto = (data.quantize or {}).get("auto") or {}
    chosen = {str(c.get("layer")) for c in auto.get("chosen") or []}
    return list(auto.get("table") or []), chosen, str(auto.get("metric", "accuracy"))


def _sensitivity_why(data: ReportData) -> str:
    if data.quantize is None:
        return f"quantization.mode is {data.quantization_mode}: nothing was quantized"
    return "no per-layer sensitivity was measured (set quantization.sensitive_layers.auto to rank layers)"


def _placement_view(placement: Placement | None) -> dict[str, Any] | None:
    if placement is None:
        return None
    markup, drawn = graph.svg(placement)
    return {"svg": markup, "boxes": len(drawn.boxes), "transfers": drawn.transfers, "placement": placement}


def _script_json(config: dict[str, Any]) -> str:
    """JSON safe inside <script>: layer names come from the model, and "</script>" in one must not end it."""
    return json.dumps(config, sort_keys=True).replace("<", "\\u003c")


def html(data: ReportData) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reconciler.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    from reconciler.output import measured_against, number, shorten

    env.filters["num"] = number
    env.filters["subject"] = shorten
    env.globals["measured_against"] = measured_against
    env.globals["nodes_that_run"] = NODES_THAT_RUN
    env.globals["op_table"] = OP_TABLE
    configs = chart_configs(data)
    template = env.get_template("report.html.j2")
    return template.render(
        d=data,
        verdict_class=VERDICT_CLASS,
        chartjs=chartjs(),
        charts={k: [_script_json(c) for c in v] for k, v in configs.items()},
        heights={k: [int(c.get("height", 320)) for c in v] for k, v in configs.items()},
        placement=_placement_view(data.placement),
        placement_before=_placement_view(data.placement_before),
        sensitivity_why=_sensitivity_why(data),
        kept=list((data.quantize or {}).get("kept") or []),
        colors=graph.COLORS,
    )
