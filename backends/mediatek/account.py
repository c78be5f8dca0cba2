"""The compile stage's record from what ncc-tflite is given: the TFLite's own operators.

ncc-tflite compiles onnx2tf's TFLite, not the ONNX graph: BatchNormalization is folded into the
convolutions, a hard-swish written as Add/Clip/Mul/Div is one HARD_SWISH, a HardSigmoid one
RELU_0_TO_1. So coverage counts the operators the file holds (read with LiteRT's flatbuffer schema,
backends/tflite/operators.py), each placed by MediaTek's MDLA 3.0 operator guide, whose rows name the
TFLite operator they come from (the catalog's `partial_op_table`): listed yes or partial, on the MDLA
(a partial row's restrictions are not evaluated, and are counted as such); listed no, or not in the
table npuctl holds (it stops after POW), on the CPU, named. The figure is `estimated: <TOOL>`: a lower
bound from the vendor's published table over the real operators, not ncc-tflite's own placement (which
needs NeuroPilot, not installable here).

The placement is mapped back to the ONNX nodes through anchors: operator kinds that onnx2tf keeps one
to one (a Conv is one CONV_2D or DEPTHWISE_CONV_2D, a MatMul one FULLY_CONNECTED, ...), paired in
execution order when both sides hold the same number of that kind. The ONNX nodes between two anchors
run where the TFLite operators between the same two anchors run (a pad split off the next anchor
aside): on the MDLA when all of them do (or when onnx2tf fused them into the anchors), else on the CPU. Without anchors the nodes keep the op
table's placement, and the note says the mapping failed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.sdk.vocab import estimated_by

TOOL = "MDLA 3.0 guide on the TFLite"
EVIDENCE = estimated_by(TOOL)
NPU, CPU = "NPU", "CPU"
_ROW_OPS = re.compile(r"\[mapped via TFLite ([A-Z0-9_ /]+);")

ANCHORS: tuple[tuple[frozenset[str], frozenset[str]], ...] = (
    (frozenset({"Conv"}), frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "CONV_3D"})),
    (frozenset({"ConvTranspose"}), frozenset({"TRANSPOSE_CONV"})),
    (frozenset({"Gemm", "MatMul"}), frozenset({"FULLY_CONNECTED", "BATCH_MATMUL"})),
    (frozenset({"MaxPool"}), frozenset({"MAX_POOL_2D"})),
    (frozenset({"AveragePool"}), frozenset({"AVERAGE_POOL_2D"})),
    (frozenset({"GlobalAveragePool", "ReduceMean"}), frozenset({"MEAN"})),
    (frozenset({"Softmax"}), frozenset({"SOFTMAX"})),
    (frozenset({"HardSigmoid"}), frozenset({"RELU_0_TO_1"})),
    (frozenset({"Concat"}), frozenset({"CONCATENATION"})),
    (frozenset({"Resize"}), frozenset({"RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"})),
)
"""(ONNX op types, TFLite operators) that onnx2tf converts one to one."""
PADS = frozenset({"PAD", "PADV2", "MIRROR_PAD"})
"""A pad operator right before an anchor is that node's own padding (onnx2tf splits an asymmetric
`pads` attribute off the convolution or pool): it counts among the operators, not in the segment
before the node."""


@dataclass(frozen=True)
class Operator:
    """One TFLite operator as the MDLA table places it."""

    index: int
    op: str
    device: str
    support: str
    """yes | partial | no | missing (not in the table npuctl holds)"""


@dataclass
class Account:
    placement: dict[str, Any]
    measurements: dict[str, dict[str, Any]]
    note: str


def mdla_support(target: Target) -> tuple[dict[str, str], str]:
    """(TFLite operator -> yes/partial/no, the table's id@version) from the target's MDLA table."""
    from backends.catalog import op_table

    table = op_table(str(target.extra.get("partial_op_table") or target.op_table))
    rows = [(r.supported, r.constraints) for r in table.ops.values()]
    rows += [(str(r.get("supported")), str(r.get("constraints"))) for r in table.unmapped]
    support: dict[str, str] = {}
    for level, constraints in rows:
        found = _ROW_OPS.search(constraints or "")
        for name in found.group(1).split("/") if found else ():
            support[name.strip()] = level
    return support, f"{table.id}@{table.version}"


def place(ops: Sequence[Mapping[str, Any]], support: Mapping[str, str]) -> list[Operator]:
    out = []
    for k, op in enumerate(ops):
        level = support.get(str(op["op"]), "missing")
        out.append(Operator(k, str(op["op"]), NPU if level in ("yes", "partial") else CPU, level))
    return out


def onnx_devices(nodes: Sequence[tuple[str, str]], placed: Sequence[Operator]) -> dict[str, str]:
    """ONNX node name -> device, for `nodes` ((name, op_type) in graph order) through the anchors;
    empty when no anchor pairs up."""
    pairs: list[tuple[int, int]] = []
    for onnx_types, tflite_ops in ANCHORS:
        mine = [i for i, (_, t) in enumerate(nodes) if t in onnx_types]
        theirs = [o.index for o in placed if o.op in tflite_ops]
        if mine and len(mine) == len(theirs):
            pairs += list(zip(mine, theirs, strict=True))
    pairs.sort()
    if not pairs or any(b[1] <= a[1] for a, b in itertools.pairwise(pairs)):
        return {}  # no anchor, or anchors out of order: no mapping is better than a wrong one
    devices = {nodes[i][0]: placed[j].device for i, j in pairs}
    bounds = [(-1, -1), *pairs, (len(nodes), len(placed))]
    anchors = {j for _, j in pairs}
    for (i0, j0), (i1, j1) in itertools.pairwise(bounds):
        between = [o for o in placed[j0 + 1 : j1] if not (o.op in PADS and o.index + 1 in anchors)]
        device = CPU if any(o.device == CPU for o in between) else NPU
        for i in range(i0 + 1, i1):
            devices[nodes[i][0]] = device
    return devices


def cpu_runs(placed: Sequence[Operator]) -> int:
    runs, previous = 0, NPU
    for o in placed:
        runs += o.device == CPU and previous != CPU
        previous = o.device
    return runs


def read(
    ops: Sequence[Mapping[str, Any]], source: Path | None, target: Target, quantization: Mapping[str, Any]
) -> Account:
    """The account of the TFLite whose operators are `ops`, mapped to the ONNX model `source`."""
    support, table = mdla_support(target)
    placed = place(ops, support)
    found = measurements(placed, table)
    report: dict[str, Any] = {}
    mapped = ""
    if source is not None:
        report = onnx_placement(source, placed, target, quantization)
        mapped = (
            "" if report.get("mapped") else "; no operator maps back to an ONNX node: nodes keep the op table"
        )
    summary = operators_summary(placed)
    npu = sum(1 for o in placed if o.device == NPU)
    text = f"{TOOL}: {npu}/{len(placed)} TFLite operators on the MDLA{mapped}"
    if summary["cpu"]:
        text += f" (off it: {', '.join(f'{k} x{v}' for k, v in summary['cpu'].items())})"
    from backends.passes.placement import disagreement_note

    disagree = disagreement_note(report) if report else ""
    report["tool_operators"] = summary
    return Account(report, found, f"{text}; {disagree}" if disagree else text)


def onnx_placement(
    source: Path, placed: Sequence[Operator], target: Target, quantization: Mapping[str, Any]
) -> dict[str, Any]:
    import onnx

    from backends.passes import placement as P
    from backends.passes.facts import analyse

    model = onnx.load(str(source), load_external_data=False)
    facts = analyse(model)
    nodes = [(facts.names[i], facts.nodes[i].op_type) for i in facts.runtime_nodes()]
    devices = onnx_devices(nodes, placed)
    report = P.with_tool(model, target, quantization, devices, TOOL, f"{TOOL} (onnx2tf's operators)")
    report["mapped"] = bool(devices)
    return report


def operators_summary(placed: Sequence[Operator]) -> dict[str, Any]:
    def count(ops: Sequence[Operator]) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in ops:
            out[o.op] = out.get(o.op, 0) + 1
        return dict(sorted(out.items()))

    return {
        "operators": len(placed),
        "npu": sum(1 for o in placed if o.device == NPU),
        "cpu": count([o for o in placed if o.device == CPU]),
        "partial": count([o for o in placed if o.support == "partial"]),
        "not_in_table": count([o for o in placed if o.support == "missing"]),
    }


def measurements(placed: Sequence[Operator], table: str) -> dict[str, dict[str, Any]]:
    """npu_coverage and fallback_partitions over the TFLite's operators."""
    summary = operators_summary(placed)
    npu, total = summary["npu"], summary["operators"]
    detail = (
        f"{npu}/{total} of the TFLite's operators (what ncc-tflite compiles) are in MediaTek's MDLA 3.0 "
        f"operator table ({table})"
    )
    if summary["partial"]:
        detail += f"; {sum(summary['partial'].values())} under restrictions not evaluated"
    missing = summary["not_in_table"]
    if missing:
        listed = ", ".join(f"{k} x{v}" for k, v in missing.items())
        detail += (
            f"; not in the table npuctl holds (it stops after POW), counted off the MDLA: {listed}, so the "
            "figure is a lower bound"
        )
    detail += "; ncc-tflite's own placement needs NeuroPilot"
    runs = cpu_runs(placed)
    return {
        "npu_coverage": {
            "value": round(npu / total, 6) if total else 0.0,
            "evidence": EVIDENCE,
            "detail": detail,
        },
        "fallback_partitions": {
            "value": runs,
            "evidence": EVIDENCE,
            "detail": f"runs of TFLite operators off the MDLA, in execution order ({total - npu} operator(s))",
        },
    }
