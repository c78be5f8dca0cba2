"""Two revisions of one spec side by side (`npuctl report SPEC --rev A --rev B`, DVC's `plots diff`):
every measurement both lock files record (latency percentiles, accuracy, size, coverage, memory), the
throughput derived from them, and the per-layer profile's times where both profiles are in the store.

Everything compared is what each revision's lock file recorded, so two commits compare without a
checkout or a rebuild; the profiles, which lock files hold by digest only, come from the local store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine import throughput
from reconciler.state.lockread import LockView
from reconciler.state.store import Store

ORDER = (
    "latency_ms.p50",
    "latency_ms.p90",
    "latency_ms.p95",
    "latency_ms.p99",
    "latency_ms.mean",
    "throughput_fps",
    "accuracy",
    "size_mb",
    "npu_coverage",
    "fallback_partitions",
    "peak_memory_mb",
)
"""The rows first shown, in this order; any other measurement follows by name."""
FPS = "throughput_fps"
TOP_LAYERS = 15
"""Per-layer rows shown: the layers whose time changed most."""


@dataclass(frozen=True)
class Side:
    label: str
    """How the revision is named: `v1 (abcdef123456)`, or `working tree`."""
    lock: LockView


@dataclass(frozen=True)
class Row:
    variant: str
    name: str
    old: float | None
    new: float | None

    @property
    def delta(self) -> float | None:
        return None if self.old is None or self.new is None else self.new - self.old


@dataclass(frozen=True)
class LayerRow:
    name: str
    op_type: str
    old_ms: float | None
    new_ms: float | None

    @property
    def delta_ms(self) -> float | None:
        return None if self.old_ms is None or self.new_ms is None else self.new_ms - self.old_ms


@dataclass
class RevisionDiff:
    spec: str
    old: str
    new: str
    rows: list[Row] = field(default_factory=list)
    layers: list[LayerRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "spec": self.spec,
            "old": self.old,
            "new": self.new,
            "measurements": [{**vars(r), "delta": r.delta} for r in self.rows],
            "layers": [{**vars(r), "delta_ms": r.delta_ms} for r in self.layers],
            "notes": self.notes,
        }


def values(lock: LockView) -> dict[str, dict[str, float]]:
    """variant -> measurement name -> value, with the derived throughput."""
    fps = throughput.from_lock(lock)
    out: dict[str, dict[str, float]] = {}
    for variant, entry in lock.variants.items():
        measured = {name: float(m.value) for name, m in entry.measurements.items() if m.value is not None}
        if variant in fps:
            measured[FPS] = fps[variant]
        out[variant] = measured
    return out


def _order(name: str) -> tuple[int, str]:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def _profile(lock: LockView, store: Store) -> dict[str, Any] | None:
    evaluate = lock.variant("default").stages.get("evaluate")
    meta = evaluate.artifacts.get("profile") if evaluate is not None else None
    if meta is None or not store.has(meta.digest):
        return None
    try:
        data = json.loads(store.path(meta.digest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _layers(profile: dict[str, Any]) -> dict[str, tuple[str, float]]:
    return {
        str(layer.get("name")): (str(layer.get("op_type", "")), float(layer.get("time_ms") or 0.0))
        for layer in profile.get("layers") or []
    }


def layer_rows(old: dict[str, Any], new: dict[str, Any], top: int = TOP_LAYERS) -> list[LayerRow]:
    """The layers of two profiles by name, those whose time changed most first."""
    before, after = _layers(old), _layers(new)
    rows = [
        LayerRow(
            name,
            (after.get(name) or before.get(name) or ("", 0.0))[0],
            before[name][1] if name in before else None,
            after[name][1] if name in after else None,
        )
        for name in set(before) | set(after)
    ]

    def change(row: LayerRow) -> float:
        return abs(row.delta_ms) if row.delta_ms is not None else abs(row.old_ms or row.new_ms or 0.0)

    return sorted(rows, key=lambda r: (-change(r), r.name))[:top]


def diff(spec: str, old: Side, new: Side, store: Store) -> RevisionDiff:
    out = RevisionDiff(spec, old.label, new.label)
    before, after = values(old.lock), values(new.lock)
    for variant in sorted(set(before) | set(after), key=lambda v: (v != "default", v)):
        a, b = before.get(variant, {}), after.get(variant, {})
        for name in sorted(set(a) | set(b), key=_order):
            out.rows.append(Row(variant, name, a.get(name), b.get(name)))
    profiles = [_profile(side.lock, store) for side in (old, new)]
    if profiles[0] is not None and profiles[1] is not None:
        out.layers = layer_rows(profiles[0], profiles[1])
    else:
        missing = [side.label for side, p in zip((old, new), profiles, strict=True) if p is None]
        out.notes.append(
            f"per-layer profile: not in the local store for {' and '.join(missing)} "
            "(`npuctl pull` at that revision brings it)"
        )
    return out
