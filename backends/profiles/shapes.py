"""The fixed-shape-variant rule: where a smaller fixed shape of the same model would cut latency, and
by how much, estimated from the profile.

Two cases read off the deployed graph, whatever the model:
- a batch: every input (of rank 3 or more) and output shares a leading dimension b > 1. A request that comes alone still
  pays for b; a batch-1 variant would answer it in about 1/b of the layers' time (each layer's work
  scales with the batch; its fixed costs do not, so this is an upper bound of the gain).
- an upsampled input: a Resize that enlarges a graph input's spatial grid before any other layer (a
  folded-in preprocess resizing small frames up to the model's size, or the model's own first op).
  Every layer after it computes on pixels the input never had; a variant at the input's own size
  would scale them by the pixel ratio (each layer's time taken to scale with its pixels).
Both are estimates from measured (or simulated) layer times and the graph's shapes, and say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import onnx

from backends.profiles.attribution import layers_ms

EVIDENCE = "estimated: the profile's layer times scaled by the variant's share of the work (batch or pixels)"


def _dims(value_info: Any) -> list[int]:
    return [d.dim_value for d in value_info.type.tensor_type.shape.dim]


def batch_variant(profile: Mapping[str, Any], model: onnx.ModelProto) -> dict[str, Any] | None:
    graph = model.graph
    if any(len(_dims(i)) < 3 for i in graph.input):  # [N, C, H, W], [N, S, D]: a rank-2 input's
        return None  # first dimension may be a sequence as well as a batch
    shapes = [_dims(v) for v in (*graph.input, *graph.output)]
    leading = {dims[0] if dims else None for dims in shapes}
    if len(leading) != 1 or not isinstance(b := next(iter(leading)), int) or b <= 1:
        return None
    layers = list(profile.get("layers") or [])
    gain = layers_ms(layers) * (1.0 - 1.0 / b)
    return {
        "field": "shape_variants",
        "value": [{i.name: [1, *_dims(i)[1:]] for i in graph.input}],
        "expected_gain_ms": round(gain, 6),
        "why": f"the model is fixed at batch {b}: a request that comes alone pays for {b}; a batch-1 variant "
        f"would answer it in about 1/{b} of the layers' {layers_ms(layers):.3f} ms (an upper bound: each layer's "
        "fixed cost stays)",
        "layers": [],
    }


def _downstream(graph: Any, start: str) -> set[str]:
    """Names of the nodes that read `start`'s outputs, directly or through others."""
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    by_name = {n.name: n for n in graph.node}
    seen: set[str] = set()
    stack = list(by_name[start].output)
    while stack:
        for node in consumers.get(stack.pop(), []):
            if node.name not in seen:
                seen.add(node.name)
                stack.extend(node.output)
    return seen


def _upsampling_resize(model: onnx.ModelProto) -> tuple[Any, float] | None:
    """The first Resize fed (through shape-keeping ops only) by a graph input whose output grid is
    larger than its input's, with the pixel ratio input/output."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: _dims(v) for v in (*inferred.graph.input, *inferred.graph.value_info)}
    passthrough = {"Cast", "Transpose", "Sub", "Div", "Mul", "Add", "Identity", "Unsqueeze", "Squeeze"}
    reached = {i.name for i in model.graph.input}
    for node in model.graph.node:
        if not any(t in reached for t in node.input):
            continue
        if node.op_type == "Resize":
            before, after = shapes.get(node.input[0]) or [], shapes.get(node.output[0]) or []
            if len(before) == len(after) and before and all(d > 0 for d in (*before, *after)):
                ratio = math.prod(before) / math.prod(after)  # the pixels' ratio, in any layout
                return (node, ratio) if ratio < 1.0 else None
            return None
        if node.op_type in passthrough:
            reached.update(node.output)
    return None


def upsampled_input_variant(profile: Mapping[str, Any], model: onnx.ModelProto) -> dict[str, Any] | None:
    found = _upsampling_resize(model)
    if found is None:
        return None
    resize, ratio = found
    after = _downstream(model.graph, resize.name)
    moved = [layer for layer in profile.get("layers") or [] if set(layer.get("onnx_nodes") or []) & after]
    if not moved:
        return None
    gain = layers_ms(moved) * (1.0 - ratio)
    return {
        "field": "shape_variants",
        "value": None,
        "expected_gain_ms": round(gain, 6),
        "why": f"{resize.name} enlarges the input {1 / ratio:.2f}x in pixels before the first layer: the "
        f"{len(moved)} layers after it ({layers_ms(moved):.3f} ms) compute on pixels the input never had; a "
        f"fixed variant at the input's own size would take about {ratio:.2f} of their time",
        "layers": [layer["name"] for layer in moved],
    }


def shape_variant_rule(profile: Mapping[str, Any], model: onnx.ModelProto | None) -> dict[str, Any] | None:
    """The larger of the two cases' suggestions (they are alternatives, not a sum), or None."""
    if model is None:
        return None
    found = [s for s in (batch_variant(profile, model), upsampled_input_variant(profile, model)) if s]
    if not found:
        return None
    best = max(found, key=lambda s: float(s["expected_gain_ms"]))
    best["estimate"] = EVIDENCE
    return best
