"""`plan --base`: the per-layer profiles of two lock files, layer by layer.

Each lock file names its evaluate profile (profile.json) by digest; both are read from the store (a
profile built elsewhere and not fetched is reported missing, never guessed). Layers are matched by the
deployed ONNX nodes they ran (a runtime's own layer, mapped to none, by its name), so a layer renamed by
the runtime still matches, and one whose node set grew (quantization's Q/DQ nodes, one more fused
node) pairs with the base layer it shares most nodes with. Per matched layer: its time base -> now, and whether its device, placement or
executed precision changed; layers only one side has are listed as added or removed. A layer "got
slower" when its time grew by more than SLOWER_RATIO and by at least SLOWER_SHARE of the base profile's
total: the profiler's own run-to-run spread on a small layer is not a regression.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.state.lockread import LockView

SLOWER_RATIO = 1.10
SLOWER_SHARE = 0.01
CHANGED_FIELDS = ("device", "placement", "precision")
SHOWN = 10


@dataclass
class LayerChange:
    key: str
    op_type: str | None
    base_ms: float | None
    now_ms: float | None
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def delta_ms(self) -> float:
        return (self.now_ms or 0.0) - (self.base_ms or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.key,
            "op_type": self.op_type,
            "base_ms": self.base_ms,
            "now_ms": self.now_ms,
            "delta_ms": round(self.delta_ms, 6),
            "changed": {k: {"base": a, "now": b} for k, (a, b) in self.changed.items()},
        }


@dataclass
class VariantLayers:
    variant: str
    missing: str | None = None
    base_total_ms: float | None = None
    now_total_ms: float | None = None
    slower: list[LayerChange] = field(default_factory=list)
    faster: int = 0
    changed: list[LayerChange] = field(default_factory=list)
    added: list[LayerChange] = field(default_factory=list)
    removed: list[LayerChange] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "missing": self.missing,
            "base_total_ms": self.base_total_ms,
            "now_total_ms": self.now_total_ms,
            "slower": [c.to_json() for c in self.slower],
            "faster": self.faster,
            "changed": [c.to_json() for c in self.changed],
            "added": [c.to_json() for c in self.added],
            "removed": [c.to_json() for c in self.removed],
        }


def _key(layer: Mapping[str, Any]) -> str:
    nodes = list(layer.get("onnx_nodes") or [])
    return ", ".join(nodes) if nodes else str(layer.get("name"))


def _match(
    old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]
) -> tuple[
    list[tuple[Mapping[str, Any], Mapping[str, Any]]], list[Mapping[str, Any]], list[Mapping[str, Any]]
]:
    """(base, now) pairs, the now-only and the base-only layers. A now layer pairs with the unpaired base
    layer sharing most of its ONNX nodes (so quantization adding Q/DQ nodes to a layer, or a fusion
    taking one more, still pairs it); a layer of no ONNX node pairs by its runtime name."""
    owner: dict[str, int] = {}
    for i, layer in enumerate(old):
        for name in layer.get("onnx_nodes") or [f"\0{layer.get('name')}"]:
            owner.setdefault(str(name), i)
    taken: set[int] = set()
    pairs, added = [], []
    for layer in new:
        votes: dict[int, int] = {}
        for name in layer.get("onnx_nodes") or [f"\0{layer.get('name')}"]:
            at = owner.get(str(name))
            if at is not None and at not in taken:
                votes[at] = votes.get(at, 0) + 1
        if votes:
            best = max(votes, key=lambda k: (votes[k], -k))
            taken.add(best)
            pairs.append((old[best], layer))
        else:
            added.append(layer)
    return pairs, added, [layer for i, layer in enumerate(old) if i not in taken]


def diff(base: Mapping[str, Any], now: Mapping[str, Any], variant: str) -> VariantLayers:
    """The layer diff of two profiles (backends.profiles format)."""
    old, new = list(base.get("layers") or []), list(now.get("layers") or [])
    out = VariantLayers(variant)
    out.base_total_ms = round(sum(float(x["time_ms"]) for x in old), 6)
    out.now_total_ms = round(sum(float(x["time_ms"]) for x in new), 6)
    floor = SLOWER_SHARE * out.base_total_ms
    pairs, added, removed = _match(old, new)
    for was, layer in pairs:
        change = LayerChange(
            _key(layer), layer.get("op_type"), float(was["time_ms"]), float(layer["time_ms"])
        )
        change.changed = {f: (was.get(f), layer.get(f)) for f in CHANGED_FIELDS if was.get(f) != layer.get(f)}
        base_ms = change.base_ms or 0.0
        if change.delta_ms > floor and (change.now_ms or 0.0) > base_ms * SLOWER_RATIO:
            out.slower.append(change)
        elif change.delta_ms < -floor and base_ms > (change.now_ms or 0.0) * SLOWER_RATIO:
            out.faster += 1
        if change.changed:
            out.changed.append(change)
    out.added = [LayerChange(_key(x), x.get("op_type"), None, float(x["time_ms"])) for x in added]
    out.removed = [LayerChange(_key(x), x.get("op_type"), float(x["time_ms"]), None) for x in removed]
    out.slower.sort(key=lambda c: -c.delta_ms)
    return out


def _profile_digests(lock: LockView | None) -> dict[str, str]:
    out = {}
    for name, variant in (lock.variants if lock is not None else {}).items():
        evaluate = variant.stages.get("evaluate")
        entry = evaluate.artifacts.get("profile") if evaluate is not None else None
        if entry is not None and entry.digest:
            out[name] = entry.digest
    return out


def compare_locks(
    base_lock: LockView | None, lock: LockView | None, read: Callable[[str], Path | None]
) -> list[VariantLayers]:
    """Per variant both lock files profile (with different profiles), their layer diff. `read` gives a
    digest's file in the store, or None when the store does not hold it intact."""
    old, new = _profile_digests(base_lock), _profile_digests(lock)
    out = []
    for variant in sorted(set(old) & set(new)):
        if old[variant] == new[variant]:
            continue
        paths = {side: read(digest) for side, digest in (("base", old[variant]), ("now", new[variant]))}
        lost = [
            f"{side}'s profile.json {d[:12]}"
            for side, d in (("base", old[variant]), ("now", new[variant]))
            if paths[side] is None
        ]
        if lost:
            out.append(
                VariantLayers(
                    variant,
                    missing=f"{' and '.join(lost)} not in this store (npuctl pull, or apply at that revision)",
                )
            )
            continue
        try:
            profiles = {
                side: json.loads(path.read_text()) for side, path in paths.items() if path is not None
            }
        except (OSError, ValueError) as exc:
            out.append(VariantLayers(variant, missing=f"a profile.json is unreadable: {exc}"))
            continue
        out.append(diff(profiles["base"], profiles["now"], variant))
    return out
