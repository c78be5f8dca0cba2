"""The compile stage's record from rknn-toolkit2's own report of the build it just ran.

Placement, coverage, partitions and crossings come from the layer table mapped back to the ONNX nodes
(backends.rknn.layer_table), with the op table's placement of the same model beside it and every node
where the two differ; the latency estimate is the table's per-layer cycles at the NPU's clock from the
catalog (plus the roofline's CPU and transfer time for whatever the tool leaves to the CPU), and the
memory estimate is the internal and weight memory the toolkit planned. All of it is evidence
`estimated: rknn-toolkit2`: the toolkit's own model of one NPU core, not a measurement of a board
(`eval_perf` and `eval_memory` need one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.rknn.layer_table import TOOL, LayerTable, NodePlacement
from backends.sdk.vocab import estimated_by

EVIDENCE = estimated_by(TOOL)


@dataclass
class Account:
    """What compile records from the toolkit's report: the placement report and its measurements."""

    placement: dict[str, Any]
    measurements: dict[str, dict[str, Any]]
    note: str


def read(
    log: Path, model: Path, target: Any, quantization: Mapping[str, Any], sdk: str | None
) -> Account | None:
    """The account of the build whose log is `log`, or None when the log holds no layer table."""
    import onnx

    from backends.passes import placement as P
    from backends.passes.facts import analyse
    from backends.rknn import layer_table

    table = layer_table.parse(log.read_text(errors="replace"))
    if table is None:
        return None
    onnx_model = onnx.load(str(model), load_external_data=False)
    placed = layer_table.placement(table, analyse(onnx_model))
    source = f"{TOOL} {sdk or ''} build layer table".replace("  ", " ")
    report = P.with_tool(onnx_model, target, quantization, placed.devices, TOOL, source)
    report["tool_layers"] = layers_summary(table, placed)
    found = P.measurements(report, EVIDENCE)
    found["npu_coverage"]["detail"] += layer_detail(table, placed)
    latency = latency_ms(table, report["estimate"], target)
    if latency is not None:
        found["latency_ms.estimate"] = latency
    memory = table.memory_mb
    if memory is not None:
        found["peak_memory_mb"] = {
            "value": memory,
            "evidence": EVIDENCE,
            "detail": f"{source}: internal (feature map) memory {table.internal_kb:g} KB + weight memory "
            f"{table.weight_kb:g} KB as the toolkit planned them; the runtime's own buffers are not in it",
        }
    return Account(report, found, note(report, table))


def layers_summary(table: LayerTable, placed: NodePlacement) -> dict[str, Any]:
    compute = table.compute_layers
    return {
        "layers": len(compute),
        "npu_layers": sum(1 for layer in compute if layer.target == "NPU"),
        "cpu_layers": [f"{layer.op_type} {layer.full_name}" for layer in compute if layer.target == "CPU"],
        "cycles": table.cycles,
        "internal_memory_kb": table.internal_kb,
        "weight_memory_kb": table.weight_kb,
        "nodes_named": len(placed.named),
        "nodes_fused": len(placed.fused),
        "layers_naming_no_node": [layer.full_name for layer in placed.unmapped],
    }


def layer_detail(table: LayerTable, placed: NodePlacement) -> str:
    compute = table.compute_layers
    npu = sum(1 for layer in compute if layer.target == "NPU")
    text = f"; {npu}/{len(compute)} of the toolkit's layers on the NPU"
    cpu = [layer for layer in compute if layer.target == "CPU"]
    if cpu:
        names = ", ".join(f"{layer.op_type} {layer.name}" for layer in cpu[:5])
        text += f" (CPU: {names}{' ...' if len(cpu) > 5 else ''})"
    if placed.fused:
        text += f"; {len(placed.fused)} ONNX node(s) fused or folded into named layers"
    return text


def latency_ms(table: LayerTable, estimate: Mapping[str, Any], target: Any) -> dict[str, Any] | None:
    """The table's cycles at the catalog's NPU clock, plus the roofline's CPU and transfer time for the
    nodes the toolkit leaves to the CPU (its table gives CPU layers no cycles). None without a clock."""
    mhz = target.extra.get("npu_clock_mhz")
    if not mhz:
        return None
    npu_ms = table.cycles / (float(mhz) * 1e3)
    rest = float(estimate.get("cpu_ms") or 0.0) + float(estimate.get("transfer_ms") or 0.0)
    detail = (
        f"{TOOL}'s layer table: {table.cycles} cycles (sum of the layers' DDR/NPU total) at "
        f"{float(mhz):g} MHz, one NPU core"
    )
    if rest:
        detail += (
            f"; plus the roofline's {rest:g} ms for the CPU layers and crossings the table does not time"
        )
    return {"value": round(npu_ms + rest, 6), "evidence": EVIDENCE, "detail": detail}


def note(report: Mapping[str, Any], table: LayerTable) -> str:
    from backends.passes.placement import disagreement_note

    cov = report["coverage"]["nodes"]
    text = (
        f"{TOOL}: {cov['npu']}/{cov['total']} nodes on the NPU, "
        f"{len(report.get('crossings') or [])} crossing(s), {table.cycles} cycles"
    )
    disagree = disagreement_note(report)
    return f"{text}; {disagree}" if disagree else text
