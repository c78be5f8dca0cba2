"""Where the quantizers go: on the inputs of the ops the target runs in integer, not on every tensor.

ONNX Runtime's quantizer, left to itself, puts a Q/DQ pair on every tensor of every op it knows,
including the decode tail of a detector: a YOLOv8-style head concatenates box coordinates (0-320)
and class scores (0-1) under one uint8 scale of ~1.26, and every score below 0.63 becomes 0 (box F1
0.54). NNCF does better because it quantizes only what the hardware runs in integer. The rule
here (`placement: target`, the default):

- integer ops are the op types ONNX Runtime's quantizer handles that the target's op table runs
  (supported yes/partial); the others are never quantized;
- the tail, every node from which no compute op (Conv, MatMul, Gemm, ...) is reachable, only
  rearranges, decodes or post-processes: it stays float on a target that runs float layers;
- a Concat whose inputs' calibrated ranges differ by more than MIX_FACTOR (the range-mixing check) is
  kept float there; on a target that runs the graph in integer but has 16-bit activations (QNN's HTP:
  A16W8) its inputs and output are quantized at 16 bits, where a score in 0-1 beside pixel
  coordinates keeps ~200 levels instead of none; elsewhere it is reported with the fix to apply
  (split the concat, its inputs quantized apart), because one 8-bit scale cannot hold both.

`placement: every_op` is ONNX Runtime's own default (every op it knows, tails included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.catalog import Target, op_table
from backends.passes.quant import channel_ranges
from backends.passes.quant.policy import COMPUTE_OPS, has_float

if TYPE_CHECKING:
    import onnx

MIX_FACTOR = 16.0
"""Inputs of one Concat whose range widths differ by more than this share one scale badly: at 8 bits
the narrow input keeps at most 256 / 16 = 16 levels."""

PLACEMENTS = ("target", "every_op")


@dataclass(frozen=True)
class Mixed:
    """A Concat joining tensors of very different ranges (range-mixing check)."""

    node: str
    output: str
    widths: tuple[tuple[str, float], ...]
    """(input tensor, calibrated range width), in input order."""
    ratio: float
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "output": self.output,
            "inputs": [{"tensor": t, "range_width": round(w, 6)} for t, w in self.widths],
            "ratio": round(self.ratio, 2),
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Placement:
    rule: str
    op_types: list[str]
    """Op types handed to the quantizer."""
    float_nodes: dict[str, str] = field(default_factory=dict)
    """Node -> why placement leaves it float."""
    mixed: list[Mixed] = field(default_factory=list)
    float_tail: bool = True
    """False when the target (or its backend) runs the whole graph in integer."""
    wide_tensors: list[str] = field(default_factory=list)
    """Tensors quantized at 16 bits in every build (mixed-range concats on an integer-only target)."""

    def report(self) -> dict[str, Any]:
        tail = sorted(n for n, why in self.float_nodes.items() if why == "tail")
        return {
            "rule": self.rule,
            "text": self.text(),
            "op_types": self.op_types,
            "float_nodes": dict(sorted(self.float_nodes.items())),
            "tail_nodes": len(tail),
            "range_mixing": [m.as_dict() for m in self.mixed],
            **({"wide_tensors": self.wide_tensors} if self.wide_tensors else {}),
        }

    def text(self) -> str:
        if self.rule == "every_op":
            return "placement every_op: Q/DQ on every op ONNX Runtime quantizes (tails included)"
        tail = sum(1 for why in self.float_nodes.values() if why == "tail")
        where = (
            f"{tail} tail nodes after the last compute op float"
            if self.float_tail
            else "tail kept integer (the target runs this graph in integer)"
        )
        return (
            f"placement by target: Q/DQ on inputs of the {len(self.op_types)} op types the target runs in "
            f"integer, {where}"
        )


def note(report: Mapping[str, Any]) -> str:
    """The stage note's placement part, from `Placement.report()`: the rule, then every mixed range."""
    mixed = [
        f"range mixing: {m['node']} ({m['output']}): input ranges {m['ratio']:.0f}x apart, {m['fix']}"
        for m in report.get("range_mixing", [])
    ]
    channels = channel_ranges.note(report.get("channel_ranges") or [])
    return "; ".join([report["text"], *mixed, *([channels] if channels else [])])


def plan(
    model: onnx.ModelProto,
    ranges: Path,
    target: Target,
    rule: str,
    known_ops: Sequence[str],
    integer_graph: bool = False,
    wide: str | None = None,
) -> Placement:
    """The placement of `rule` for `model` on `target`, given the calibrated ranges (a TensorsData file).
    `integer_graph`: the backend runs the whole graph in integer (QNN's HTP context), so nothing stays
    float whatever the target's precisions say. `wide`: the 16-bit activation type the build would use,
    quantizing a mixed-range concat there when nothing can stay float (kept only if the target lists it)."""
    float_ok = has_float(target) and not integer_graph
    widen = not float_ok and rule == "target" and wide is not None and wide in target.precisions
    if float_ok and rule == "target":
        fix = "kept float (its inputs quantized apart)"
    elif float_ok:
        fix = "suggested: placement target (keeps it float, its inputs quantized apart)"
    elif widen:
        fix = f"its inputs and output quantized at {wide} (the target runs this graph in integer)"
    else:
        fix = (
            f"suggested: split the concat into separate outputs and quantize its inputs apart (target "
            f"{target.id} runs this graph in integer and one integer scale cannot hold both ranges)"
        )
    widths = load_widths(ranges)
    mixed = range_mixing(model, widths, fix)
    unbounded = dict.fromkeys(unbounded_nodes(model, widths), UNBOUNDED)
    if rule == "every_op":
        return Placement(rule, sorted(known_ops), unbounded, mixed)
    ops = integer_ops(target, known_ops)
    floats: dict[str, str] = {}
    if float_ok:
        floats = dict.fromkeys(tail_nodes(model), "tail")
        for m in mixed:
            floats.setdefault(m.node, "range mixing")
    for name, why in unbounded.items():
        floats.setdefault(name, why)
    widened = sorted({t for m in mixed for t in (m.output, *(name for name, _ in m.widths))}) if widen else []
    return Placement(rule, ops, floats, mixed, float_ok, widened)


UNBOUNDED = "unbounded range"


def unbounded_nodes(model: onnx.ModelProto, widths: Mapping[str, float]) -> list[str]:
    """Nodes that write or read a tensor whose calibrated range is infinite (an additive attention mask
    of -inf, and the scores it is added to): no integer scale holds it (a scale of inf is what a
    converter then refuses, and every finite value quantizes to 0), so they stay float on every
    target, a graph run in integer included. Where they are placed is then the compiler's choice."""
    import math

    infinite = {t for t, w in widths.items() if not math.isfinite(w)}
    if not infinite:
        return []
    return [n.name for n in model.graph.node if infinite & {*n.input, *n.output}]


def integer_ops(target: Target, known_ops: Sequence[str]) -> list[str]:
    """The quantizer's op types the target's op table runs (yes/partial); compute ops are always in."""
    table = op_table(target.op_table)
    out = []
    for op in known_ops:
        row = table.lookup(op)
        if op in COMPUTE_OPS or (row is not None and row.supported in ("yes", "partial")):
            out.append(op)
    return sorted(out)


def tail_nodes(model: onnx.ModelProto) -> list[str]:
    """Nodes from which no compute op is reachable: the decode / post-process tail, in graph order."""
    nodes = list(model.graph.node)
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            consumers.setdefault(name, []).append(i)
    feeds = [False] * len(nodes)
    """feeds[i]: a compute op is node i itself or downstream of it."""
    changed = True
    while changed:  # fixed point: node order need not be topological
        changed = False
        for i, node in enumerate(nodes):
            if feeds[i]:
                continue
            if node.op_type in COMPUTE_OPS or any(
                feeds[j] for o in node.output for j in consumers.get(o, [])
            ):
                feeds[i] = True
                changed = True
    return [n.name for n, f in zip(nodes, feeds, strict=True) if not f]


def data_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from the graph inputs' values, not only from their shapes or constants (a
    converter folds shape arithmetic, such as anchor grids made from Shape, into constants)."""
    weights = {t.name for t in model.graph.initializer}
    data = {i.name for i in model.graph.input if i.name not in weights}
    changed = True
    while changed:  # a fixed point: the node order need not be topological
        changed = False
        for node in model.graph.node:
            if node.op_type in ("Shape", "Size") or not any(t in data for t in node.input):
                continue
            fresh = [t for t in node.output if t and t not in data]
            if fresh:
                data.update(fresh)
                changed = True
    return data


def data_tail(model: onnx.ModelProto) -> list[str]:
    """The tail's nodes on the data path (tail_nodes less the shape arithmetic), in graph order."""
    data = data_tensors(model)
    by_name = {node.name: node for node in model.graph.node}
    return [n for n in tail_nodes(model) if by_name[n].output and by_name[n].output[0] in data]


def joining_concats(model: onnx.ModelProto) -> list[str]:
    """The tail's Concats that join two or more data tensors: where a decode puts values of different
    ranges (box coordinates, scores) under one tensor, and so under one integer scale. Found from the
    graph alone, for converters that calibrate by themselves (no ranges to compare)."""
    data = data_tensors(model)
    by_name = {node.name: node for node in model.graph.node}
    return [
        n
        for n in data_tail(model)
        if by_name[n].op_type == "Concat" and sum(t in data for t in by_name[n].input) >= 2
    ]


def mixed_joins(model: onnx.ModelProto, samples: Sequence[Any], fix: str) -> list[Mixed]:
    """The joining concats (joining_concats) whose inputs' ranges, measured on the float model over
    `samples`, differ by more than MIX_FACTOR: for converters that calibrate by themselves, the same
    rule as range_mixing on ranges measured here."""
    import numpy as np

    from backends.passes.quant.points import float_values

    joins = set(joining_concats(model))
    if not joins or not samples:
        return []
    names = sorted({t for n in model.graph.node if n.name in joins for t in n.input if t})
    widths: dict[str, float] = {}
    for values in float_values(model, names, samples):
        for name, value in values.items():
            if value.dtype.kind == "f" and value.size:
                width = max(float(np.max(value)), 0.0) - min(float(np.min(value)), 0.0)
                widths[name] = max(widths.get(name, 0.0), width)
    return [m for m in range_mixing(model, widths, fix) if m.node in joins]


def load_widths(ranges: Path) -> dict[str, float]:
    """Tensor -> calibrated range width (max(hi, 0) - min(lo, 0), what one 8-bit scale must span)."""
    import numpy as np
    from onnxruntime.quantization.calibrate import load_tensors_data

    out: dict[str, float] = {}
    for name, td in load_tensors_data(ranges).data.items():
        try:
            lo, hi = td.range_value
        except AttributeError:
            continue
        out[name] = max(float(np.max(hi)), 0.0) - min(float(np.min(lo)), 0.0)
    return out


def range_mixing(model: onnx.ModelProto, widths: Mapping[str, float], fix: str) -> list[Mixed]:
    """Every Concat whose non-constant inputs' range widths differ by more than MIX_FACTOR."""
    constants = {t.name for t in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type != "Concat":
            continue
        pairs = [(t, widths[t]) for t in node.input if t and t not in constants and t in widths]
        live = [w for _, w in pairs if w > 0]
        if len(live) < 2:
            continue
        ratio = max(live) / min(live)
        if ratio <= MIX_FACTOR:
            continue
        found.append(Mixed(node.name, node.output[0], tuple(pairs), ratio, fix))
    return found
