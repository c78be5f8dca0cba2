"""The check stage: where every node of the imported model runs on the target, and what that costs.

Output artifact `placement` (placement.json, deterministic): per-node device with the failed and the
not-evaluated constraint clauses, partitions, boundary crossings with bytes per inference, coverage by
node count and MACs, and the roofline estimate. The stage report carries the summary and the
`npu_coverage`, `fallback_partitions` and `latency_ms.estimate` measurements (evidence `estimated`).
`render_table` draws the same report for `npuctl explain` / `report`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line
from backends.sdk.vocab import NODES_THAT_RUN, OP_TABLE

if TYPE_CHECKING:
    from rich.table import Table


def _dist(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


def quantization_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """{"mode", "weights", "activations"} from the stage config, dotted ("quantization.mode") or nested."""
    nested = config.get("quantization")
    out: dict[str, Any] = dict(nested) if isinstance(nested, Mapping) else {}
    for key in ("mode", "weights", "activations"):
        dotted = f"quantization.{key}"
        if dotted in config:
            out[key] = config[dotted]
    return out


class CheckPass:
    """Stage "check": config `target`, `quantization.mode|weights|activations`; input `model`."""

    stage = "check"

    def fingerprint(self) -> dict[str, str]:
        return {"onnx": _dist("onnx"), "numpy": _dist("numpy")}

    def run(self, request: StageRequest) -> StageOutput:

        from backends.passes import placement as P
        from backends.passes.facts import load_light

        try:
            # placement folds constants only up to facts.MATERIALIZE_LIMIT elements: larger weights'
            # data stays unread (reading a 1 GB model whole made shape inference copy it many times)
            model = load_light(Path(request.inputs["model"]))
        except Exception as exc:
            raise TerminalError(f"check: cannot read the model: {one_line(exc, 200)}") from exc
        report = P.compute(model, request.target, quantization_config(request.config))
        path = request.workdir / "placement.json"
        path.write_text(dump_json(report))
        write_log(request.log, report)
        summary = summarize(report)
        summary["measurements"] = P.measurements(report)
        return StageOutput(
            artifacts={"placement": path}, report=summary, note=placement_note(report, request.target)
        )


def placement_note(report: Mapping[str, Any], target: Any) -> str:
    """One line: how much runs on the NPU and how often the model crosses to the CPU; for a target with
    no NPU (the host CPU), just where everything runs. A placement from the op table says so: it serves
    until a compiler reports its own."""
    cov = report["coverage"]["nodes"]
    if not getattr(target, "npu_cores", 1):
        return f"{cov['total']} {NODES_THAT_RUN}, all on the CPU (the {report['target']} target has no NPU)"
    crossings = len(report.get("crossings") or [])
    by = f" ({OP_TABLE}, before compile)" if str(report.get("source", "")).startswith("op-table") else ""
    return f"{cov['npu']}/{cov['total']} {NODES_THAT_RUN} on the NPU, {crossings} boundary crossing(s) to the CPU{by}"


def dump_json(data: Any) -> str:
    """Deterministic JSON (sorted keys, fixed indentation, trailing newline)."""
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def summarize(report: Mapping[str, Any]) -> dict[str, Any]:
    """The stage report: placement.json without the per-node list (that stays in the artifact)."""
    return {
        "target": report["target"],
        "source": report["source"],
        "op_table": report["op_table"],
        "precision": report["precision"],
        "coverage": report["coverage"],
        "partitions": {
            "npu": sum(1 for p in report["partitions"] if p["device"] == "NPU"),
            "cpu": sum(1 for p in report["partitions"] if p["device"] == "CPU"),
        },
        "crossings": {
            "count": len(report["crossings"]),
            "bytes": sum(c["bytes"] for c in report["crossings"]),
        },
        "fallback_ops": report["fallback_ops"],
        "unverified_nodes": report["unverified_nodes"],
        "estimate": {k: v for k, v in report["estimate"].items() if k != "partitions"},
        **{k: report[k] for k in ("op_table_coverage", "disagreements", "tool_layers") if k in report},
    }


def write_log(path: Path, report: Mapping[str, Any]) -> None:
    """The placement table and summary as plain aligned text: the stage log is read in an editor, and a
    rich table of a few hundred nodes took longer to lay out than the whole check."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [COLUMNS, *_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [_title(report)]
    for row in rows:
        cells = [
            cell.rjust(width) if column in _RIGHT else cell.ljust(width)
            for column, cell, width in zip(COLUMNS, row, widths, strict=False)
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines.append(f"source: {report['source']}")
    lines.extend(summary_lines(report))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


COLUMNS = ("node", "op", "device", "part", "MACs", "why")
_RIGHT = ("part", "MACs")


def _title(report: Mapping[str, Any]) -> str:
    cov = report["coverage"]["nodes"]
    return f"placement on {report['target']}: {cov['npu']}/{cov['total']} nodes on the NPU"


def _rows(
    report: Mapping[str, Any], only_fallback: bool = False, limit: int | None = None
) -> list[tuple[str, ...]]:
    """One row of COLUMNS per node (or per fallback node), with the reason."""
    rows = [n for n in report["nodes"] if not only_fallback or n["device"] != "NPU"]
    out: list[tuple[str, ...]] = []
    for n in rows[:limit] if limit is not None else rows:
        why = "; ".join(n["failed"]) if n["device"] != "NPU" else ""
        if not why and n["not_evaluated"]:
            why = "not evaluated: " + "; ".join(n["not_evaluated"])
        if not why and n.get("reason"):
            why = n["reason"]
        out.append((n["name"], n["op_type"], n["device"], str(n["partition"]), f"{n['macs']:,}", why))
    return out


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    cov = report["coverage"]
    nodes, macs = cov["nodes"], cov["macs"]
    lines = [
        f"target {report['target']} ({report['source']}), NPU precision {report['precision']['npu_dtype']}",
        f"coverage: {nodes['npu']}/{nodes['total']} nodes"
        + (f", {macs['fraction']:.1%} of MACs" if macs["fraction"] is not None else ""),
        f"partitions: {len(report['partitions'])}; crossings: {len(report['crossings'])} "
        f"({sum(c['bytes'] for c in report['crossings'])} bytes per inference)",
        f"estimate: {report['estimate']['latency_ms']} ms ({report['estimate']['detail']})",
    ]
    for op, entry in report["fallback_ops"].items():
        lines.append(f"fallback {op} x{entry['count']}: {entry['reason']}")
    return lines


def render_table(
    report: Mapping[str, Any], *, only_fallback: bool = False, limit: int | None = None
) -> Table:
    """The placement report as a rich Table: one row per node (or per fallback node), with the reason."""
    from rich.table import Table

    table = Table(title=_title(report), caption=f"source: {report['source']}", show_lines=False)
    for column in COLUMNS:
        justify = "right" if column in _RIGHT else "left"
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in _rows(report, only_fallback, limit):
        table.add_row(*row, style="red" if row[2] != "NPU" else None)
    return table
