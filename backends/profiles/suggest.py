"""What to do next: rules that turn a profile into suggestions, each naming the spec field to change and
its expected gain, ranked by that gain (the fixed-shape-variant rule is in backends.profiles.shapes).

Every gain is an estimate (named so): the measured time of the layers a change would move, minus the
roofline time the same work needs where it would go. The rewrite rule does not guess which ops the
library can replace: it dry-runs the rewrite library (backends.passes.rewrite.stage) on the float model for the
target and bills only the fallback layers whose ONNX nodes that run really moves to the NPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx

from backends.profiles.attribution import layers_ms, roofline

MIN_GAIN_SHARE = 0.02
"""A suggestion worth less than this share of the profiled time is noise, not advice."""

PREPROCESS_MARK = "/preprocess/"
"""backends.passes.preprocess.stage names the nodes it prepends `<input>/preprocess/<step>`."""

GAIN_NOTE = "estimated: measured time of the layers moved minus their roofline time where they would run"


def _on_npu(layer: Mapping[str, Any], target: Any) -> float:
    """The roofline time of a layer's work on the target's NPU at its precision."""
    moved = {**layer, "placement": "NPU", "device": "NPU"}
    return float(roofline(moved, target)["roofline_ms"])


def rewrite_rule(
    profile: Mapping[str, Any], target: Any, float_model: onnx.ModelProto | None, precision: Mapping[str, Any]
) -> dict[str, Any] | None:
    """rewrite.replace_unsupported, when the library moves fallback layers of this profile to the NPU."""
    from backends.passes.estimate import crossing_ms
    from backends.passes.rewrite.stage import rewrite_model

    fallback = set((profile.get("attribution") or {}).get("fallback_layers") or [])
    if not fallback or float_model is None or target.npu_cores == 0:
        return None
    result = rewrite_model(float_model, target, precision, {}, log=lambda _: None)
    cpu_before = {n["name"] for n in result.before.get("nodes", []) if n["device"] == "CPU"}
    cpu_after = {n["name"] for n in result.placement.get("nodes", []) if n["device"] == "CPU"}
    removed = cpu_before - cpu_after
    moved = [
        layer
        for layer in profile.get("layers") or []
        if layer["name"] in fallback and set(layer["onnx_nodes"]) & removed
    ]
    if not moved:
        return None
    before, after = result.before.get("crossings") or [], result.placement.get("crossings") or []
    saved_crossings = len(before) - len(after)
    from_layers = layers_ms(moved) - sum(_on_npu(layer, target) for layer in moved)
    from_crossings = sum(crossing_ms(int(c["bytes"]), target) for c in before)
    from_crossings -= sum(crossing_ms(int(c["bytes"]), target) for c in after)
    gain = from_layers + from_crossings
    fired = sorted({f.name for f in result.fired if f.kind == "replace"})
    ops = sorted({str(layer.get("op_type")) for layer in moved})
    return {
        "field": "rewrite.replace_unsupported",
        "value": True,
        "expected_gain_ms": round(gain, 6),
        "from_layers_ms": round(from_layers, 6),
        "from_crossings_ms": round(from_crossings, 6),
        "why": f"{len(moved)} CPU-fallback layers ({', '.join(ops)}, {layers_ms(moved):.3f} ms measured) move to "
        f"the NPU with the rewrite library ({', '.join(fired) or 'its rewrites'}); "
        f"{max(0, saved_crossings)} fewer NPU/CPU crossings ({from_crossings:.3f} ms at the catalog's "
        f"crossing cost on {target.id}, not measured here)",
        "layers": [layer["name"] for layer in moved],
    }


def sensitive_rule(profile: Mapping[str, Any], target: Any) -> dict[str, Any] | None:
    """quantization.sensitive_layers, when layers kept in float cost more than int8 would by the peaks."""
    layers = list(profile.get("layers") or [])
    if not any(layer.get("precision") == "int8" for layer in layers):
        return None
    fp16, int8 = float(target.peak_tops_fp16), float(target.peak_tops_int8)
    ratio = fp16 / int8 if fp16 > 0 and int8 > 0 else 1.0
    floats = [
        layer
        for layer in layers
        if int(layer.get("macs") or 0) > 0 and str(layer.get("precision")) in ("fp32", "fp16", "f32", "f16")
    ]
    if not floats or ratio >= 1.0:
        return None
    gain = layers_ms(floats) * (1.0 - ratio)
    return {
        "field": "quantization.sensitive_layers",
        "value": None,
        "expected_gain_ms": round(gain, 6),
        "why": f"{len(floats)} compute layers run in float in an int8 model ({layers_ms(floats):.3f} ms measured); "
        f"int8 at the target's peak ratio {ratio:.2f} would save about this much: keep in float only the "
        f"layers whose measured accuracy gain is worth it (quantize's sensitivity report)",
        "layers": [layer["name"] for layer in floats],
    }


def preprocess_rule(profile: Mapping[str, Any], target: Any) -> dict[str, Any] | None:
    """preprocess, when the folded-in preprocessing runs off the NPU and is a visible part of the time."""
    layers = [
        layer
        for layer in profile.get("layers") or []
        if any(PREPROCESS_MARK in name for name in layer["onnx_nodes"])
        and "CPU" in str(layer.get("placement") or layer.get("device"))
    ]
    if not layers or target.npu_cores == 0:
        return None
    return {
        "field": "preprocess",
        "value": None,
        "expected_gain_ms": round(layers_ms(layers) - sum(_on_npu(x, target) for x in layers), 6),
        "why": f"the folded-in preprocessing runs on the CPU ({layers_ms(layers):.3f} ms): use the layout, dtype "
        f"or normalization form the target's NPU runs natively",
        "layers": [layer["name"] for layer in layers],
    }


def cores_rule(profile: Mapping[str, Any], target: Any, threads: int, cpus: int) -> dict[str, Any] | None:
    """compile.cores, when a CPU-run profile used one thread of several (Amdahl's bound on the gain)."""
    if target.npu_cores > 0 or threads != 1 or cpus < 2:
        return None
    compute = [layer for layer in profile.get("layers") or [] if int(layer.get("macs") or 0) > 0]
    return {
        "field": "compile.cores",
        "value": cpus,
        "expected_gain_ms": round(layers_ms(compute) * (1.0 - 1.0 / cpus), 6),
        "why": f"the run used 1 of {cpus} CPU cores; the compute layers ({layers_ms(compute):.3f} ms) are the "
        f"part that parallelises (an upper bound)",
        "layers": [],
    }


def suggest(
    profile: Mapping[str, Any],
    target: Any,
    *,
    float_model: onnx.ModelProto | None = None,
    precision: Mapping[str, Any] | None = None,
    threads: int = 0,
    cpus: int = 0,
    model: onnx.ModelProto | None = None,
) -> list[dict[str, Any]]:
    """The rules' suggestions worth at least MIN_GAIN_SHARE of the profiled time, largest gain first.
    `model` is the deployed model the profile ran (the fixed-shape-variant rule reads its graph)."""
    from backends.profiles.shapes import shape_variant_rule

    total = layers_ms(list(profile.get("layers") or []))
    found = [
        rewrite_rule(profile, target, float_model, precision or {}),
        sensitive_rule(profile, target),
        preprocess_rule(profile, target),
        cores_rule(profile, target, threads, cpus),
        shape_variant_rule(profile, model),
    ]
    kept = [
        s for s in found if s is not None and total > 0 and s["expected_gain_ms"] >= MIN_GAIN_SHARE * total
    ]
    for s in kept:
        s["share"] = round(s["expected_gain_ms"] / total, 4)
        s["evidence"] = GAIN_NOTE
    return sorted(kept, key=lambda s: -float(s["expected_gain_ms"]))
