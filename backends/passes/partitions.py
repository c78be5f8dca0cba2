"""Where a placement cuts the graph: partitions (maximal runs of nodes on one device, in topological
stages) and the tensors that cross between devices, with their bytes (the roofline's transfer cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.passes.facts import Facts


def _stages(facts: Facts, devices: Mapping[int, str]) -> dict[int, int]:
    stage: dict[int, int] = {}
    for i in sorted(devices):
        best = 0
        for t in facts.nodes[i].input:
            p = facts.producer.get(t)
            if p is None or p not in devices:
                continue
            best = max(best, stage[p] + (devices[p] != devices[i]))
        stage[i] = best
    return stage


def partitions(facts: Facts, devices: Mapping[int, str]) -> dict[int, int]:
    """node index -> partition id (ids in order of first node)."""
    stage = _stages(facts, devices)
    parent = {i: i for i in devices}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in devices:
        for t in facts.nodes[i].input:
            p = facts.producer.get(t)
            if p is not None and p in devices and devices[p] == devices[i] and stage[p] == stage[i]:
                a, b = find(p), find(i)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    ids: dict[int, int] = {}
    out: dict[int, int] = {}
    for i in sorted(devices):
        root = find(i)
        if root not in ids:
            ids[root] = len(ids)
        out[i] = ids[root]
    return out


def crossings(
    facts: Facts, devices: Mapping[int, str], part: Mapping[int, int], elem_bytes: int
) -> list[dict[str, Any]]:
    """Tensors that change device between partitions, once per tensor and receiving device."""
    out: list[dict[str, Any]] = []
    for i in sorted(devices):
        for t in facts.nodes[i].output:
            if not t:
                continue
            targets: dict[str, list[int]] = {}
            for c in facts.consumers.get(t, []):
                if c in devices and devices[c] != devices[i]:
                    targets.setdefault(devices[c], []).append(part[c])
            for device, parts in sorted(targets.items()):
                out.append(
                    {
                        "tensor": t,
                        "from_partition": part[i],
                        "to_partitions": sorted(set(parts)),
                        "direction": f"{devices[i]}->{device}",
                        "bytes": facts.nbytes(t, elem_bytes),
                    }
                )
    return out
