"""A per-layer profile from the cost model, for a target whose runtime profiles nothing here (RKNN's
simulator has no eval_perf; only a board does): every node of the model at its roofline time on the
device the check's placement plans for it, and every NPU<->CPU crossing at its hand-over cost.

Each figure is an estimate and the record says so (`evidence`, `evidence_of`, `how`): it ranks layers
and feeds the same attribution and suggestions as a measured profile, never a verdict. Per node the
time is max(compute, memory) as backends.passes.estimate costs a partition, so the layers sum to at
least the placement's partition estimate (a partition's bound is taken once over all its nodes).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

EVIDENCE = "estimated: the check stage's cost model (each node's roofline on the catalog's peaks)"


def cost_model_layers(
    model: Any, placement: Mapping[str, Any], target: Any
) -> tuple[list[dict[str, Any]], int]:
    """(layers, nodes of the model the placement does not plan: added after the check, not costed)."""
    from backends.passes.estimate import PartitionWork, Precision, crossing_ms, node_cost, partition_ms
    from backends.passes.facts import analyse

    facts = analyse(model)
    precision = Precision(**dict(placement["precision"]))
    planned = {str(n["name"]): str(n["device"]) for n in placement.get("nodes") or []}
    layers, unplanned = [], 0
    for node, name in zip(facts.nodes, facts.names, strict=True):
        if name not in planned:
            unplanned += node.op_type != "Constant"
            continue
        device = planned[name]
        cost = node_cost(node, facts)
        work = PartitionWork(device, cost.macs, cost.ops, cost.weight_elems, cost.activation_elems)
        layers.append(
            {
                "name": name,
                "op_type": node.op_type,
                "onnx_nodes": [name],
                "inserted": False,
                "device": device,
                "executed_by": "cost model",
                "precision": precision.npu_dtype if device == "NPU" else "fp32",
                "time_ms": round(partition_ms(work, target, precision)[0], 6),
            }
        )
    for k, crossing in enumerate(placement.get("crossings") or []):
        layers.append(
            {
                "name": f"crossing {k} {crossing['direction']}: {crossing['tensor']}",
                "op_type": "Memcpy",
                "onnx_nodes": [],
                "inserted": True,
                "device": str(crossing["direction"]),
                "executed_by": "cost model",
                "precision": None,
                "time_ms": round(crossing_ms(int(crossing["bytes"]), target), 6),
            }
        )
    return layers, unplanned


def cost_model_profile(
    model_path: Path, placement: Mapping[str, Any], target: Any, why: str
) -> dict[str, Any] | None:
    """The profile record (backends.profiles format) with every time the cost model's; None without a
    placement to cost against."""
    import onnx

    from backends import profiles

    if not placement.get("nodes") or not placement.get("precision"):
        return None
    model = onnx.load(str(model_path), load_external_data=False)
    layers, unplanned = cost_model_layers(model, placement, target)
    profiles.with_costs(layers, model, placement)
    how = (
        f"{why}: each node of {model_path.name} at its roofline time on the device the check's placement "
        f"plans for it, each of the {len(placement.get('crossings') or [])} NPU/CPU crossings at the "
        "catalog's hand-over cost; nothing ran"
    )
    if unplanned:
        how += f"; {unplanned} nodes added after the check (preprocessing) are not costed"
    profile = profiles.build(
        runtime="cost model (backends.passes.estimate)",
        evidence=EVIDENCE,
        how=how,
        layers=layers,
        runs=[],
        timed_p50_ms=None,
        target=target,
        device_evidence="estimated: the check stage's placement on the target",
    )
    for top in profile["attribution"]["top"]:
        top["achieved_of_roofline"] = None  # each time is its roofline: nothing was achieved
    return profile
