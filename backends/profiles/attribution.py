"""Where a profile's time goes: fallbacks, transfers, top layers, op types, and each layer against its
roofline on the target (the catalog's peak ops and bandwidth).

Shares are of the layers' summed time (what the profiler billed to layers, less its own cost where a
probe measured it). Against evaluate's timed (unprofiled) p50 the layers are accounted beside what the probe
measured without the profiler: a run's fixed cost (the binding, feeds and fetches, the executor's
set-up) and the dispatch between kernels, per node times the layers. What is left is
`unattributed_ms` (noise, or output copies larger than the probe's), never spread over layers. With a one-thread
session `layers_of_timed_cpu` sets them against the timed runs' CPU time: on a shared machine a run of
milliseconds is preempted more often than a kernel of microseconds (whose middle mean drops the
preempted runs), and CPU time is not. Roofline and utilisation are estimates: MACs and bytes come from the cost model,
the peaks from the catalog, and the record names them so.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

TOP = 10

TRANSFER_OPS = frozenset({"MemcpyFromHost", "MemcpyToHost", "Memcpy"})
"""Runtime-inserted copies between a device partition and the host: the boundary transfers."""

LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput"})
"""Runtime-inserted layout changes (ORT's NCHWc blocking): overhead that is neither layer nor transfer."""

COARSE_LAYER_MS = 0.002
"""A median layer under 2 us is within twice the resolution of ORT's trace (whole microseconds) and of
the profiler's own per-node cost: its layer times and shares are indicative only."""

RESOLUTION_NOTE = (
    "coarse when the median layer takes under 2 us (ORT's trace counts whole microseconds and costs "
    "1-3 us per node itself): layer times and shares are then indicative only"
)

UTILISATION_NOTE = (
    "estimated: 2 x MACs / (time x peak), MACs from the cost model, peak from the catalog "
    "(the NPU's peak ops at the layer's precision; a CPU fallback against the target's CPU GFLOPS)"
)


def layers_ms(layers: Iterable[Mapping[str, Any]]) -> float:
    """The layers' summed time: what every share and every suggestion's gain is a part of."""
    return sum(float(layer["time_ms"]) for layer in layers)


def _peak_ops(layer: Mapping[str, Any], target: Any) -> tuple[float, str]:
    """Ops per second the layer's device offers on the target, and which catalog figure it is."""
    on_cpu = "CPU" in str(layer.get("placement") or layer.get("device") or "")
    if target.npu_cores > 0 and on_cpu:
        return float(target.cpu_gflops) * 1e9, f"cpu_gflops {target.cpu_gflops}"
    if str(layer.get("precision") or "") in ("int8", "uint8"):
        return float(target.peak_tops_int8) * 1e12, f"peak_tops_int8 {target.peak_tops_int8}"
    return float(target.peak_tops_fp16) * 1e12, f"peak_tops_fp16 {target.peak_tops_fp16}"


def roofline(layer: Mapping[str, Any], target: Any) -> dict[str, Any]:
    """Compute- or memory-bound on the target, the roofline time, and how close the layer came to it."""
    peak, peak_name = _peak_ops(layer, target)
    bandwidth = float(target.bandwidth_gbps) * 1e9
    compute_ms = 2.0 * float(layer.get("macs") or 0) / peak * 1e3 if peak > 0 else 0.0
    memory_ms = float(layer.get("bytes") or 0) / bandwidth * 1e3 if bandwidth > 0 else 0.0
    bound_ms = max(compute_ms, memory_ms)
    time_ms = float(layer["time_ms"])
    return {
        "bound": "compute" if compute_ms >= memory_ms and compute_ms > 0 else "memory",
        "roofline_ms": round(bound_ms, 6),
        "achieved_of_roofline": round(bound_ms / time_ms, 4) if time_ms > 0 else None,
        "utilisation_estimate": round(compute_ms / time_ms, 4) if time_ms > 0 and peak > 0 else None,
        "peak": peak_name,
    }


def _is_fallback(layer: Mapping[str, Any], target: Any, ran_npu: bool) -> bool:
    if layer.get("inserted"):
        return False
    if target.npu_cores > 0 and layer.get("placement") and "CPU" in str(layer["placement"]):
        return True
    return ran_npu and layer.get("device") == "CPU"


def _share(part: float, total: float) -> float | None:
    return round(part / total, 4) if total > 0 else None


def attribute(profile: Mapping[str, Any], target: Any) -> dict[str, Any]:
    """The attribution block of a profile (see the module docstring)."""
    layers = list(profile.get("layers") or [])
    total = layers_ms(layers)
    ran_npu = any(layer.get("device") == "NPU" for layer in layers)
    fallback = [layer for layer in layers if _is_fallback(layer, target, ran_npu)]
    ordered = sorted(layers, key=lambda layer: -float(layer["time_ms"]))
    cost = profile.get("profiler_cost") or {}
    return {
        "resolution": _resolution(layers, cost),
        "layers_sum_ms": round(total, 6),
        "raw_layers_sum_ms": round(sum(float(x.get("raw_time_ms", x["time_ms"])) for x in layers), 6),
        **_against_timed(profile, cost, len(layers), total),
        "shares": _shares(layers, fallback, ordered, total),
        "fallback_layers": [x["name"] for x in fallback],
        "unmapped_layers": sum(1 for x in layers if not x.get("onnx_nodes") and not x.get("inserted")),
        "top": [_top_entry(layer, total, target) for layer in ordered[:TOP]],
        "op_types": _op_types(layers, total),
        **_utilisation(layers, total, target),
    }


def _shares(
    layers: list[Mapping[str, Any]],
    fallback: list[Mapping[str, Any]],
    ordered: list[Mapping[str, Any]],
    total: float,
) -> dict[str, float | None]:
    """The parts of the layers' time spent in CPU fallbacks, boundary transfers, layout reorders and
    the TOP slowest layers."""
    return {
        "cpu_fallback": _share(layers_ms(fallback), total),
        "boundary_transfers": _share(layers_ms(x for x in layers if x.get("op_type") in TRANSFER_OPS), total),
        "layout_reorders": _share(layers_ms(x for x in layers if x.get("op_type") in LAYOUT_OPS), total),
        "top10": _share(layers_ms(ordered[:TOP]), total),
    }


def _resolution(layers: list[Mapping[str, Any]], cost: Mapping[str, Any]) -> dict[str, Any]:
    """How fine the layer times are: coarse when a probe measured the profiler and the median layer
    is under COARSE_LAYER_MS."""
    typical = statistics.median([float(x["time_ms"]) for x in layers]) if layers else 0.0
    return {
        "median_layer_ms": round(typical, 6),
        "coarse": bool(cost) and typical < COARSE_LAYER_MS,
        "note": RESOLUTION_NOTE,
    }


def _against_timed(
    profile: Mapping[str, Any], cost: Mapping[str, Any], nodes: int, total: float
) -> dict[str, Any]:
    """The layers and the probe's fixed and per-node costs set against evaluate's timed p50 (and, for a
    one-thread session, its CPU time): what is left over is unattributed."""
    latency = profile.get("latency_ms") or {}
    timed = latency.get("timed_p50")
    timed_cpu = latency.get("timed_cpu_p50") if profile.get("threads") == 1 else None
    fixed = float(cost["run_fixed_us"]) / 1e3 if "run_fixed_us" in cost else None
    dispatch = float(cost["dispatch_per_node_us"]) * nodes / 1e3 if "dispatch_per_node_us" in cost else None
    accounted = total + (fixed or 0.0) + (dispatch or 0.0)
    return {
        "run_fixed_ms": round(fixed, 6) if fixed is not None else None,
        "dispatch_ms": round(dispatch, 6) if dispatch is not None else None,
        "unattributed_ms": round(float(timed) - accounted, 6) if timed is not None else None,
        "accounted_of_timed": round(accounted / float(timed), 4) if timed else None,
        "layers_of_timed": round(total / float(timed), 4) if timed else None,
        "layers_of_timed_cpu": round(total / float(timed_cpu), 4) if timed_cpu else None,
        "timed_cpu_ms": timed_cpu,
        "timed_ms": timed,
    }


def _top_entry(layer: Mapping[str, Any], total: float, target: Any) -> dict[str, Any]:
    return {
        "name": layer["name"],
        "onnx_nodes": layer.get("onnx_nodes") or [],
        "inserted": bool(layer.get("inserted")),
        "op_type": layer.get("op_type"),
        "device": layer.get("device"),
        "placement": layer.get("placement"),
        "time_ms": layer["time_ms"],
        "share": _share(float(layer["time_ms"]), total),
        **roofline(layer, target),
    }


def _op_types(layers: list[Mapping[str, Any]], total: float) -> dict[str, dict[str, Any]]:
    """Per op type: how many layers, their summed time and its share; the slowest type first."""
    by_op: dict[str, dict[str, Any]] = {}
    for layer in layers:
        entry = by_op.setdefault(str(layer.get("op_type")), {"count": 0, "time_ms": 0.0})
        entry["count"] += 1
        entry["time_ms"] += float(layer["time_ms"])
    for entry in by_op.values():
        entry["time_ms"] = round(entry["time_ms"], 6)
        entry["share"] = _share(entry["time_ms"], total)
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1]["time_ms"]))


def _utilisation(layers: list[Mapping[str, Any]], total: float, target: Any) -> dict[str, Any]:
    """The whole model's estimated utilisation, against the peak of the precision that ran the most MACs."""
    macs = sum(int(layer.get("macs") or 0) for layer in layers)
    peak, peak_name = _peak_ops({"precision": _main_precision(layers)}, target)
    return {
        "utilisation_estimate": round(2.0 * macs / (total / 1e3 * peak), 4)
        if total > 0 and peak > 0
        else None,
        "utilisation_peak": peak_name,
        "utilisation_note": UTILISATION_NOTE,
    }


def _main_precision(layers: list[Mapping[str, Any]]) -> str | None:
    """The precision that ran the most MACs: the whole model's utilisation is judged against its peak."""
    weight: dict[str, int] = {}
    for layer in layers:
        key = str(layer.get("precision") or "")
        weight[key] = weight.get(key, 0) + int(layer.get("macs") or 0)
    return max(weight, key=lambda k: weight[k]) if weight else None
