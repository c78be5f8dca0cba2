"""Per-layer profiles: one format every runtime's profiler is mapped into, and what evaluate records.

profile.json (an evaluate artifact; the lock file carries only its digest and the report a summary):
    {"format_version": 1, "runtime", "evidence", "how", "runs", "threads" (intra-op, 0: the runtime's
     default, null: not known), "per_run": [{"kernels_us", "runtime_us",
     "wall_us"}] (each profiled run: its kernels' sum, the runtime's and the wall time of the whole run),
     "latency_ms": {"timed_p50": unprofiled p50 of the same evaluate, "profiled_p50": wall time of the
                    profiled runs, "runtime_p50": the runtime's own whole-run time (when it gives one),
                    "timed_cpu_p50": the timed runs' CPU time on the calling thread (a one-thread
                                     session's whole work, free of the machine's preemptions)},
     "layers": [{"name", "op_type", "onnx_nodes": [...], "inserted", "device", "executed_by", "precision",
                 "time_ms", "raw_time_ms", "profiler_cost_ms", "macs", "bytes", "placement"}],
     "profiler_cost": what the probe measured (bench_ort), or null: the profiler's own cost per node
                      (time_ms is the profiler's figure less it, raw_time_ms the profiler's figure),
                      and without the profiler a run's fixed cost and the dispatch per node,
     "evidence_of": {"time_ms", "device", "precision", "macs", "bytes", "placement"},
     "attribution": backends.profiles.attribution.attribute(...)}
A runtime adds a mapper producing the layer fields up to time_ms (backends/onnxruntime/_profile.py,
backends/openvino/profile.py); `with_costs` adds the cost model's MACs and bytes and the placement's
device for the same ONNX nodes. Per-layer cycles from a simulator or a vendor CSV (QNN, vela) map into
the same layers with their own `evidence_of["time_ms"]` (e.g. "estimated: vela performance model").
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

FORMAT_VERSION = 1

COST_EVIDENCE = "estimated: the check stage's cost model (backends.passes.estimate) on the deployed model"


def with_costs(layers: list[dict[str, Any]], model: onnx.ModelProto, placement: Mapping[str, Any]) -> None:
    """Adds each layer's MACs and bytes moved (weights + activations read and written, at the
    placement's precision) and the device the target's placement plans for its ONNX nodes."""
    from backends.passes.estimate import node_cost
    from backends.passes.facts import analyse

    facts = analyse(model)
    index = {name: i for i, name in enumerate(facts.names)}
    precision = placement.get("precision") or {}
    a_bytes, w_bytes = int(precision.get("activation_bytes") or 4), int(precision.get("weight_bytes") or 4)
    planned = {str(n["name"]): str(n["device"]) for n in placement.get("nodes") or []}
    for layer in layers:
        macs = moved = 0
        devices = set()
        for name in layer["onnx_nodes"]:
            if name in index:
                cost = node_cost(facts.nodes[index[name]], facts)
                macs += cost.macs
                moved += cost.weight_elems * w_bytes + cost.activation_elems * a_bytes
            if name in planned:
                devices.add(planned[name])
        layer["macs"], layer["bytes"] = macs, moved
        layer["placement"] = "/".join(sorted(devices)) if devices else None


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 6) if values else None


def build(
    *,
    runtime: str,
    evidence: str,
    how: str,
    layers: list[dict[str, Any]],
    runs: list[dict[str, float]],
    timed_p50_ms: float | None,
    timed_cpu_p50_ms: float | None = None,
    target: Any,
    device_evidence: str,
    profiler_cost: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The profile record, with its attribution against the target's peaks."""
    from backends.profiles.attribution import attribute

    latency = {
        "timed_p50": timed_p50_ms,
        "profiled_p50": _p50([r["wall_us"] / 1e3 for r in runs if "wall_us" in r]),
        "runtime_p50": _p50([r["runtime_us"] / 1e3 for r in runs if "runtime_us" in r]),
        "timed_cpu_p50": round(timed_cpu_p50_ms, 6) if timed_cpu_p50_ms is not None else None,
    }
    profile = {
        "format_version": FORMAT_VERSION,
        "runtime": runtime,
        "evidence": evidence,
        "how": how,
        "runs": len(runs),
        "threads": threads,
        "per_run": runs,
        "latency_ms": latency,
        "layers": sorted(layers, key=lambda layer: -float(layer["time_ms"])),
        "profiler_cost": dict(profiler_cost) if profiler_cost else None,
        "evidence_of": {
            "time_ms": evidence,
            "device": device_evidence,
            "precision": device_evidence,
            "macs": COST_EVIDENCE,
            "bytes": COST_EVIDENCE,
            "placement": "estimated: the check stage's placement on the target",
        },
    }
    profile["attribution"] = attribute(profile, target)
    return profile


def summary(profile: Mapping[str, Any]) -> dict[str, Any]:
    """What evaluate's report (and so the lock file) carries: totals, shares and the top layers' names."""
    attribution = profile.get("attribution") or {}
    return {
        "file": "profile.json",
        "runtime": profile.get("runtime"),
        "evidence": profile.get("evidence"),
        "how": profile.get("how"),
        "layers": len(profile.get("layers") or []),
        "latency_ms": profile.get("latency_ms"),
        "layers_sum_ms": attribution.get("layers_sum_ms"),
        "run_fixed_ms": attribution.get("run_fixed_ms"),
        "dispatch_ms": attribution.get("dispatch_ms"),
        "layers_of_timed": attribution.get("layers_of_timed"),
        "layers_of_timed_cpu": attribution.get("layers_of_timed_cpu"),
        "accounted_of_timed": attribution.get("accounted_of_timed"),
        "shares": attribution.get("shares"),
        "top": [t["name"] for t in (attribution.get("top") or [])[:3]],
        "suggestions": [
            {k: s[k] for k in ("field", "expected_gain_ms", "share")}
            for s in profile.get("suggestions") or []
        ],
    }


def write(profile: Mapping[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(profile, indent=1, sort_keys=True) + "\n")
    return path


def read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path.name} is not a profile (format_version {FORMAT_VERSION})")
    return data
