"""Placement of every runtime node on the NPU or the CPU, and what follows from it.

Two ways to decide devices, one way to compute the rest: `table_decisions` places nodes with the
catalog's op table and the constraint evaluator; a backend that can report its own placement (OpenVINO
`query_model`, the RKNN build report) passes a node -> device map to `build_report`, which wins over the
table for the nodes it names and records its source. Partitions, boundary crossings (bytes per
inference), coverage by node count and by MACs, and the roofline estimate are computed the same way for
both, so reports from different sources compare.

Partitions are connected same-device subgraphs that can run as one unit: a node's "stage" is the number
of device changes on the longest path reaching it, and a partition is a connected component of
same-device, same-stage nodes. Contracting partitions this way never creates a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.passes import constraints as C
from backends.passes import estimate as E
from backends.passes.partitions import crossings, partitions
from backends.sdk.vocab import OP_TABLE, EvidenceKind, Verdict

if TYPE_CHECKING:
    import onnx

    from backends.catalog import OpTable, Target
    from backends.passes.facts import Facts

FORMAT_VERSION = 1
NPU, CPU = "NPU", "CPU"


@dataclass
class Decision:
    """Where one node runs and why."""

    device: str
    support: str
    """yes | partial | no | unknown | missing (not in the table) | backend"""
    source: str
    failed: list[str] = field(default_factory=list)
    not_evaluated: list[str] = field(default_factory=list)
    reason: str = ""


def table_source(table: OpTable) -> str:
    return f"op-table {table.id}@{table.version}"


def context_for(precision: E.Precision, facts: Facts) -> C.Context:
    return C.Context(
        npu_dtype=precision.npu_dtype,
        activations=precision.activations,
        weights=precision.weights,
        quantized=precision.mode in ("ptq", "qat"),
        opset=facts.opset,
    )


def decide(node: onnx.NodeProto, facts: Facts, table: OpTable, ctx: C.Context, has_npu: bool) -> Decision:
    """One node's placement from the op table and its constraint clauses."""
    source = table_source(table)
    row = table.lookup(node.op_type, node.domain)
    if row is None:
        return Decision(CPU, "missing", source, reason=f"{node.op_type} is not in the op table")
    verdicts = C.evaluate(row, node, facts, ctx)
    failed, unknown = C.summarize(verdicts)
    if row.supported == "no":
        text = f": {row.constraints}" if row.constraints else ""
        return Decision(CPU, "no", source, [f"not supported{text}"], [], "op table: not supported")
    if row.supported == "unknown":
        return Decision(CPU, "unknown", source, [], unknown, "op table has no data for this op (not guessed)")
    if not has_npu:
        return Decision(CPU, row.supported, source, failed, unknown, "target has no NPU")
    if failed:
        return Decision(CPU, row.supported, source, failed, unknown, failed[0])
    return Decision(NPU, row.supported, source, [], unknown, "")


def table_decisions(
    facts: Facts, target: Target, precision: E.Precision, cache: dict[tuple[Any, ...], Decision] | None = None
) -> dict[int, Decision]:
    """Decisions for every runtime node from the target's op table.

    `cache` (node identity -> decision) may be shared between graphs whose tensors keep their shapes
    and constness under the same names, as they do across semantics-preserving rewrites.
    """
    from backends.catalog import op_table

    table = op_table(target.op_table)
    ctx = context_for(precision, facts)
    has_npu = target.npu_cores > 0
    out: dict[int, Decision] = {}
    for i in facts.runtime_nodes():
        node = facts.nodes[i]
        if cache is None:
            out[i] = decide(node, facts, table, ctx, has_npu)
            continue
        key = _node_key(node)
        if key not in cache:
            cache[key] = decide(node, facts, table, ctx, has_npu)
        out[i] = cache[key]
    return out


def _node_key(node: onnx.NodeProto) -> tuple[Any, ...]:
    """What a decision depends on besides tensor facts: name, op, wiring and scalar attributes."""
    attrs = tuple(
        (a.name, a.type, a.i, a.f, a.s, tuple(a.ints), tuple(a.floats), tuple(a.strings))
        for a in node.attribute
    )
    return (node.name, node.domain, node.op_type, tuple(node.input), tuple(node.output), attrs)


def backend_decisions(
    facts: Facts, device_map: Mapping[str, str], source: str, fallback: Mapping[int, Decision]
) -> dict[int, Decision]:
    """A backend's own node -> device map over the table's decisions (nodes it does not name keep those)."""
    out: dict[int, Decision] = {}
    for i in facts.runtime_nodes():
        device = device_map.get(facts.names[i])
        if device is None:
            out[i] = fallback[i]
            continue
        device = NPU if device.upper() == NPU else CPU
        reason = "" if device == NPU else f"{source} places it on the CPU"
        out[i] = Decision(device, "backend", source, [] if device == NPU else [reason], [], reason)
    return out


def whole_model(decisions: Mapping[int, Decision], facts: Facts, target: Target) -> Mapping[int, Decision]:
    """On a target whose runtime cannot split a model (catalog `splits_model: false`: the compiler takes
    the whole graph or refuses it), one node it cannot run keeps all of the model off the NPU, so every
    node is placed on the CPU with that reason: its coverage is 1 or 0, never a fraction."""
    if target.extra.get("splits_model", True) or target.npu_cores == 0:
        return decisions
    cpu = [i for i in sorted(decisions) if decisions[i].device == CPU]
    if not cpu:
        return decisions
    first = facts.nodes[cpu[0]]
    reason = (
        f"{target.id} cannot split a model: {len(cpu)} node(s) cannot run on its NPU "
        f"({first.op_type} {facts.names[cpu[0]]} first), so none of the model does"
    )
    return {
        i: d if d.device == CPU else Decision(CPU, d.support, d.source, [reason], d.not_evaluated, reason)
        for i, d in decisions.items()
    }


# ---------------------------------------------------------------- the report


def build_report(
    facts: Facts,
    target: Target,
    precision: E.Precision,
    decisions: Mapping[int, Decision],
    source: str,
) -> dict[str, Any]:
    """placement.json: per-node list, partitions, crossings, coverage and the estimate."""
    decisions = whole_model(decisions, facts, target)
    devices = {i: d.device for i, d in decisions.items()}
    part = partitions(facts, devices)
    cost = {i: E.node_cost(facts.nodes[i], facts) for i in devices}
    nodes = []
    for i in sorted(devices):
        d, node = decisions[i], facts.nodes[i]
        nodes.append(
            {
                "name": facts.names[i],
                "op_type": node.op_type
                if node.domain in ("", "ai.onnx")
                else f"{node.domain}:{node.op_type}",
                "device": d.device,
                "partition": part[i],
                "support": d.support,
                "macs": cost[i].macs,
                "failed": d.failed,
                "not_evaluated": d.not_evaluated,
                "source": d.source,
                "reason": d.reason,
            }
        )
        nodes += _body_nodes(facts.names[i], node, facts, d.device, part[i], target, precision)
    part_list = _partition_list(facts, devices, part, cost)
    cross = crossings(facts, devices, part, precision.activation_bytes) if target.npu_cores > 0 else []
    works = [
        E.PartitionWork(p["device"], p["macs"], p["ops"], p["weight_elems"], p["activation_elems"])
        for p in part_list
    ]
    est = E.estimate(works, [c["bytes"] for c in cross], target, precision)
    est["uncounted"] = uncounted_nodes(facts, devices, cost)
    for p in part_list:
        del p["ops"], p["weight_elems"], p["activation_elems"]
    coverage = _coverage(nodes, devices, cost)
    return {
        "format_version": FORMAT_VERSION,
        "target": target.id,
        "op_table": {"id": target.op_table, "version": target.op_table_version},
        "source": source,
        "precision": precision.as_json(),
        "nodes": nodes,
        "constant_nodes": sorted(facts.names[i] for i in facts.const_nodes),
        "partitions": part_list,
        "crossings": cross,
        "coverage": coverage,
        "fallback_ops": _fallback_ops(nodes),
        "unverified_nodes": sum(1 for n in nodes if n["device"] == NPU and n["not_evaluated"]),
        "estimate": est,
    }


def uncounted_nodes(facts: Facts, devices: Mapping[int, str], cost: Mapping[int, E.NodeCost]) -> list[str]:
    """Runtime nodes whose work the estimate could not count: an output of unknown shape (its cost
    counts as zero), or, when nothing at all was counted, every node."""
    unknown = [
        facts.names[i]
        for i in sorted(devices)
        if any(o and facts.numel(o) is None for o in facts.nodes[i].output)
    ]
    if not unknown and devices and not any(c.macs or c.ops or c.activation_elems for c in cost.values()):
        return [facts.names[i] for i in sorted(devices)]
    return unknown


def _partition_list(
    facts: Facts, devices: Mapping[int, str], part: Mapping[int, int], cost: Mapping[int, E.NodeCost]
) -> list[dict[str, Any]]:
    groups: dict[int, list[int]] = {}
    for i, p in part.items():
        groups.setdefault(p, []).append(i)
    out = []
    for pid in sorted(groups):
        members = sorted(groups[pid])
        out.append(
            {
                "id": pid,
                "device": devices[members[0]],
                "nodes": len(members),
                "first": facts.names[members[0]],
                "last": facts.names[members[-1]],
                "macs": sum(cost[i].macs for i in members),
                "ops": sum(cost[i].ops for i in members),
                "weight_elems": sum(cost[i].weight_elems for i in members),
                "activation_elems": sum(cost[i].activation_elems for i in members),
            }
        )
    return out


def _body_nodes(
    parent: str,
    node: onnx.NodeProto,
    facts: Facts,
    device: str,
    partition: int,
    target: Target,
    precision: E.Precision,
) -> list[dict[str, Any]]:
    """Report entries for the nodes inside `node`'s bodies (recursively), named `parent/branch/node`.
    A body runs where its control-flow node runs: inside a node on the CPU, every body node is on the
    CPU; inside one on the NPU, the op table decides each."""
    from backends.passes import control_flow

    out: list[dict[str, Any]] = []
    for body in control_flow.bodies(node, facts):
        decisions = table_decisions(body.facts, target, precision)
        for i in body.facts.runtime_nodes():
            child, d = body.facts.nodes[i], decisions[i]
            name = f"{parent}/{body.attr}/{body.facts.names[i]}"
            on_npu = device == NPU and d.device == NPU
            reason = d.reason if device == NPU else f"inside {parent} ({node.op_type}), which runs on the CPU"
            out.append(
                {
                    "name": name,
                    "op_type": child.op_type
                    if child.domain in ("", "ai.onnx")
                    else f"{child.domain}:{child.op_type}",
                    "device": NPU if on_npu else CPU,
                    "partition": partition,
                    "support": d.support,
                    "macs": E.node_cost(child, body.facts).macs,
                    "failed": d.failed if device == NPU else [reason],
                    "not_evaluated": d.not_evaluated,
                    "source": d.source,
                    "reason": reason,
                    "inside": parent,
                }
            )
            out += _body_nodes(name, child, body.facts, NPU if on_npu else CPU, partition, target, precision)
    return out


def _coverage(
    nodes: list[dict[str, Any]], devices: Mapping[int, str], cost: Mapping[int, E.NodeCost]
) -> dict[str, Any]:
    """Node counts include the nodes inside control-flow bodies; MACs of a control-flow node include
    its bodies' (billed to the device the node runs on)."""
    total = len(nodes)
    npu = sum(1 for n in nodes if n["device"] == NPU)
    macs = sum(c.macs for c in cost.values())
    npu_macs = sum(cost[i].macs for i, d in devices.items() if d == NPU)
    return {
        "nodes": {"npu": npu, "total": total, "fraction": _frac(npu, total)},
        "macs": {"npu": npu_macs, "total": macs, "fraction": _frac(npu_macs, macs)},
    }


def _frac(a: int, b: int) -> float | None:
    return None if b == 0 else round(a / b, 6)


def _fallback_ops(nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """op type -> {count, first reason} for CPU nodes, for the summary line and the report."""
    out: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if n["device"] != CPU:
            continue
        entry = out.setdefault(n["op_type"], {"count": 0, "reason": n["reason"] or "(no reason recorded)"})
        entry["count"] += 1
    return dict(sorted(out.items()))


def compute(
    model: onnx.ModelProto,
    target: Target,
    quantization: Mapping[str, Any],
    *,
    device_map: Mapping[str, str] | None = None,
    device_map_source: str = "",
    facts: Facts | None = None,
) -> dict[str, Any]:
    """The placement report of `model` on `target`; `device_map` (node name -> NPU/CPU) is a backend's own
    placement, which wins over the op table for the nodes it names."""
    from backends.catalog import op_table
    from backends.passes.facts import analyse

    facts = facts if facts is not None else analyse(model)
    precision = E.precision_for(target, quantization)
    decisions = table_decisions(facts, target, precision)
    source = table_source(op_table(target.op_table))
    if device_map is not None:
        decisions = backend_decisions(facts, device_map, device_map_source, decisions)
        source = device_map_source
    return build_report(facts, target, precision, decisions, source)


def measurements(report: Mapping[str, Any], evidence: str = EvidenceKind.ESTIMATED.value) -> dict[str, Any]:
    """The engine's measurement records derived from a placement report (evidence: estimated, or the
    vendor tool's `estimated: <tool>` when the placement is its own)."""
    cov = report["coverage"]
    nodes, macs = cov["nodes"], cov["macs"]
    cpu_parts = [p for p in report["partitions"] if p["device"] == CPU]
    mac_text = f"{macs['fraction']:.1%} of MACs" if macs["fraction"] is not None else "no MACs"
    unverified = report.get("unverified_nodes", 0)
    detail = f"{nodes['npu']}/{nodes['total']} nodes, {mac_text} on the NPU ({report['source']})"
    if unverified:
        detail += f"; {unverified} NPU nodes have constraints that were not evaluated"
    return {
        "npu_coverage": {"value": nodes["fraction"] or 0.0, "evidence": evidence, "detail": detail},
        "fallback_partitions": {
            "value": len(cpu_parts),
            "evidence": evidence,
            "detail": f"{len(report['crossings'])} boundary crossings, "
            f"{sum(c['bytes'] for c in report['crossings'])} bytes per inference",
        },
        "latency_ms.estimate": _estimate(report["estimate"]),
    }


def with_tool(
    model: onnx.ModelProto,
    target: Target,
    quantization: Mapping[str, Any],
    device_map: Mapping[str, str],
    tool: str,
    source: str,
) -> dict[str, Any]:
    """The placement report of a vendor tool's own placement (`device_map`, node name -> NPU/CPU), with
    the op table's placement of the same model beside it: `op_table_coverage` and, per node where they
    differ, a `disagreements` entry naming both devices and the tool as the winner."""
    from backends.passes.facts import analyse

    facts = analyse(model)
    table = compute(model, target, quantization, facts=facts)
    report = compute(
        model, target, quantization, device_map=device_map, device_map_source=source, facts=facts
    )
    report["op_table_coverage"] = table["coverage"]
    report["disagreements"] = disagreements(table, report, tool)
    return report


def disagreements(table: Mapping[str, Any], tool: Mapping[str, Any], tool_name: str) -> list[dict[str, str]]:
    """Nodes the op table and the vendor tool place on different devices: both devices, and which won."""
    placed = {n["name"]: n["device"] for n in table["nodes"]}
    return [
        {
            "node": n["name"],
            "op_type": n["op_type"],
            "op_table": placed[n["name"]],
            "tool": n["device"],
            "tool_name": tool_name,
            "won": tool_name,
        }
        for n in tool["nodes"]
        if n["name"] in placed and placed[n["name"]] != n["device"]
    ]


def disagreement_note(report: Mapping[str, Any]) -> str:
    """One clause for a stage note: how many nodes the op table placed differently, and who won."""
    found = report.get("disagreements") or []
    if not found:
        return ""
    by_op: dict[str, int] = {}
    for d in found:
        by_op[d["op_type"]] = by_op.get(d["op_type"], 0) + 1
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(by_op.items()))
    before = report.get("op_table_coverage", {}).get("nodes", {})
    return (
        f"{OP_TABLE} placed {len(found)} node(s) elsewhere ({ops}; it said {before.get('npu')}/"
        f"{before.get('total')} on the NPU); {found[0]['won']} wins"
    )


def _estimate(est: Mapping[str, Any]) -> dict[str, Any]:
    """The estimate as a measurement; no value, verdict unknown, when work went uncounted: a roofline of
    what was counted would not bound the model (a body or a shape it could not see)."""
    uncounted = list(est.get("uncounted") or [])
    if not uncounted:
        return {"value": est["latency_ms"], "evidence": "estimated", "detail": est["detail"]}
    names = ", ".join(uncounted[:5]) + (f" and {len(uncounted) - 5} more" if len(uncounted) > 5 else "")
    return {
        "value": None,
        "verdict": Verdict.UNKNOWN.word,
        "evidence": "estimated",
        "detail": f"unknown: the work of {len(uncounted)} node(s) could not be counted ({names}); the "
        f"roofline of the rest ({est['latency_ms']:g} ms) bounds nothing",
    }
