"""Roofline latency estimate from the catalog's figures and a placement.

NPU partition time = max(2 * MACs + other ops over peak TOPS, bytes moved over DRAM bandwidth): a lower
bound, since real NPUs rarely sustain their peak. CPU fallback nodes cost their ops over the board's CPU
GFLOPS (or bytes over bandwidth, whichever is larger), in float32. Each NPU<->CPU boundary crossing costs
writing and reading the tensor through DRAM plus a fixed hand-over (cache maintenance, synchronisation,
layout conversion). The result is evidence `estimated`, never a measurement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from backends.catalog import Target
    from backends.passes.facts import Facts

CROSSING_OVERHEAD_MS = 0.1
"""Default fixed cost of one NPU<->CPU hand-over; a target may override it with `crossing_overhead_ms`."""

_BYTES = {"float32": 4, "float16": 2, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int4": 1}


@dataclass(frozen=True)
class Precision:
    """How the model runs on the target's NPU, derived from the spec's quantization section."""

    mode: str
    npu_dtype: str
    """fp32 | fp16 | int8 | int16"""
    activations: str
    weights: str
    activation_bytes: int
    weight_bytes: int
    peak_tops: float
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "npu_dtype": self.npu_dtype,
            "activations": self.activations,
            "weights": self.weights,
            "activation_bytes": self.activation_bytes,
            "weight_bytes": self.weight_bytes,
            "peak_tops": self.peak_tops,
            "note": self.note,
        }


def precision_for(target: Target, quantization: Mapping[str, Any]) -> Precision:
    """The NPU precision implied by `quantization` ({"mode", "weights", "activations"}) on `target`."""
    mode = str(quantization.get("mode") or "none")
    if mode in ("ptq", "qat"):
        weights = str(quantization.get("weights") or "int8")
        acts = str(quantization.get("activations") or target.default_activation or "uint8")
        a_bytes, w_bytes = _BYTES.get(acts, 1), _BYTES.get(weights, 1)
        eight_bit = a_bytes == 1 and w_bytes == 1
        note = "" if eight_bit else "16-bit integer arithmetic: the estimate uses the fp16 peak"
        return Precision(
            mode,
            "int8" if eight_bit else "int16",
            acts,
            weights,
            a_bytes,
            w_bytes,
            target.peak_tops_int8 if eight_bit else target.peak_tops_fp16,
            note,
        )
    if mode == "fp16":
        return Precision(mode, "fp16", "float16", "float16", 2, 2, target.peak_tops_fp16)
    if "fp32" in target.precisions:
        note = "fp32 peak is not in the catalog: the estimate uses the fp16 peak"
        return Precision(mode, "fp32", "float32", "float32", 4, 4, target.peak_tops_fp16, note)
    note = f"{target.id} has no fp32 on its NPU: placement and estimate assume the compiler runs fp16"
    return Precision(mode, "fp16", "float16", "float16", 2, 2, target.peak_tops_fp16, note)


# ---------------------------------------------------------------- per-node work


@dataclass(frozen=True)
class NodeCost:
    macs: int
    ops: int
    """Non-MAC arithmetic (elementwise, pooling, reductions), one op per element touched."""
    weight_elems: int
    activation_elems: int
    """Elements of runtime inputs read plus outputs written."""


def node_cost(node: onnx.NodeProto, facts: Facts) -> NodeCost:
    """MACs and memory traffic of one runtime node (shapes unknown count as zero); a control-flow node
    carries the work of its bodies (backends.passes.control_flow)."""
    own = _own_cost(node, facts)
    inner = body_cost(node, facts)
    if inner is None:
        return own
    return NodeCost(
        own.macs + inner.macs,
        own.ops + inner.ops,
        own.weight_elems + inner.weight_elems,
        own.activation_elems + inner.activation_elems,
    )


def body_cost(node: onnx.NodeProto, facts: Facts) -> NodeCost | None:
    """The work inside an If/Loop/Scan: the costlier branch of an If, a loop body times its trip count."""
    from backends.passes import control_flow

    found = control_flow.bodies(node, facts)
    if not found:
        return None
    totals = []
    for body in found:
        costs = [node_cost(body.facts.nodes[i], body.facts) for i in body.facts.runtime_nodes()]
        totals.append(
            NodeCost(
                sum(c.macs for c in costs),
                sum(c.ops for c in costs),
                sum(c.weight_elems for c in costs),
                sum(c.activation_elems for c in costs),
            )
        )
    if node.op_type == "If":
        return max(totals, key=lambda c: (2 * c.macs + c.ops, c.activation_elems))
    times, _ = control_flow.repeats(node, facts)
    return NodeCost(
        times * sum(c.macs for c in totals),
        times * sum(c.ops for c in totals),
        sum(c.weight_elems for c in totals),
        times * sum(c.activation_elems for c in totals),
    )


def _own_cost(node: onnx.NodeProto, facts: Facts) -> NodeCost:
    data_in = [t for t in node.input if t and not facts.is_const(t)]
    weights = [t for t in node.input if t and facts.is_const(t)]
    act = sum(facts.numel(t) or 0 for t in data_in) + sum(facts.numel(t) or 0 for t in node.output if t)
    w = sum(facts.numel(t) or 0 for t in weights)
    out = sum(facts.numel(t) or 0 for t in node.output if t)
    macs = _macs(node, facts)
    ops = 0 if macs else max(out, max((facts.numel(t) or 0 for t in data_in), default=0))
    if node.op_type in ("AveragePool", "MaxPool", "LpPool"):
        kernel = 1
        for k in _attr(node, "kernel_shape", []):
            kernel *= int(k)
        ops = out * kernel
    return NodeCost(macs, ops, w, act)


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _prod(values: Iterable[int]) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n


def _macs(node: onnx.NodeProto, facts: Facts) -> int:
    op = node.op_type
    out = facts.numel(node.output[0]) if node.output else None
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w_index = 3 if op == "QLinearConv" else 1
        w = facts.static_shape(node.input[w_index]) if len(node.input) > w_index else None
        if w is None:
            return 0
        if op == "ConvTranspose":
            x = facts.numel(node.input[0])
            return (x or 0) * _prod(w[1:])
        return (out or 0) * _prod(w[1:])
    if op in ("MatMul", "MatMulInteger", "FusedMatMul"):
        a = facts.static_shape(node.input[0])
        return (out or 0) * (a[-1] if a else 0)
    if op == "Gemm":
        a = facts.static_shape(node.input[0])
        if a is None or out is None:
            return 0
        k = a[0] if _attr(node, "transA", 0) else a[-1]
        return out * k
    if op == "Einsum":
        return _einsum_macs(node, facts)
    if op in ("LSTM", "GRU", "RNN"):
        seq = facts.static_shape(node.input[0])
        hidden = int(_attr(node, "hidden_size", 0))
        if seq is None or not hidden:
            return 0
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        directions = 2 if _attr(node, "direction", b"forward") == b"bidirectional" else 1
        return directions * seq[0] * seq[1] * gates * hidden * (seq[2] + hidden)
    return 0


def _einsum_macs(node: onnx.NodeProto, facts: Facts) -> int:
    eq = _attr(node, "equation", b"")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    lhs = eq.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, name in zip(lhs, node.input, strict=False):
        shape = facts.static_shape(name)
        if shape is None or "..." in term or len(term) != len(shape):
            return 0
        sizes.update(zip(term, shape, strict=False))
    return _prod(sizes.values())


# ---------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class PartitionWork:
    device: str
    macs: int
    ops: int
    weight_elems: int
    activation_elems: int


def partition_ms(work: PartitionWork, target: Target, precision: Precision) -> tuple[float, str]:
    """(milliseconds, which bound) for one partition."""
    bw = target.bandwidth_gbps * 1e9
    if work.device == "NPU":
        flops = 2 * work.macs + work.ops
        compute = flops / (precision.peak_tops * 1e12) if precision.peak_tops > 0 else float("inf")
        nbytes = (
            work.weight_elems * precision.weight_bytes + work.activation_elems * precision.activation_bytes
        )
    else:
        flops = 2 * work.macs + work.ops
        compute = flops / (target.cpu_gflops * 1e9)
        nbytes = (work.weight_elems + work.activation_elems) * 4
    memory = nbytes / bw if bw > 0 else 0.0
    return max(compute, memory) * 1e3, "compute" if compute >= memory else "memory"


def crossing_ms(nbytes: int, target: Target) -> float:
    overhead = float(target.extra.get("crossing_overhead_ms", CROSSING_OVERHEAD_MS))
    bw = target.bandwidth_gbps * 1e9
    return (2 * nbytes / bw * 1e3 if bw > 0 else 0.0) + overhead


def estimate(
    partitions: list[PartitionWork], crossing_bytes: list[int], target: Target, precision: Precision
) -> dict[str, Any]:
    """The estimate section of placement.json."""
    per_partition = []
    npu_ms = cpu_ms = 0.0
    for work in partitions:
        ms, bound = partition_ms(work, target, precision)
        per_partition.append({"device": work.device, "ms": _r(ms), "bound": bound})
        if work.device == "NPU":
            npu_ms += ms
        else:
            cpu_ms += ms
    transfer_ms = sum(crossing_ms(b, target) for b in crossing_bytes)
    total = npu_ms + cpu_ms + transfer_ms
    overhead = float(target.extra.get("crossing_overhead_ms", CROSSING_OVERHEAD_MS))
    detail = (
        f"roofline: NPU {precision.npu_dtype} at {precision.peak_tops:g} TOPS peak, "
        f"{target.bandwidth_gbps:g} GB/s DRAM; CPU fallback fp32 at {target.cpu_gflops:g} GFLOPS; "
        f"{len(crossing_bytes)} crossings at 2x bytes/bandwidth + {overhead:g} ms each; lower bound "
        "(peak throughput, no launch overhead)"
    )
    if precision.note:
        detail += f"; {precision.note}"
    return {
        "latency_ms": _r(total),
        "npu_ms": _r(npu_ms),
        "cpu_ms": _r(cpu_ms),
        "transfer_ms": _r(transfer_ms),
        "partitions": per_partition,
        "detail": detail,
    }


def _r(x: float) -> float:
    """Rounded for deterministic, readable JSON."""
    return float(f"{x:.6g}")
