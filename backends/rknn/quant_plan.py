"""What RKNN's build is asked for: the spec's quantization section mapped onto rknn-toolkit2's config
(dtype, algorithm, per-channel, hybrid layers, auto_hybrid) with a note on every mapping, and the
calibration samples written as the toolkit's dataset files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.rknn import build as B
from backends.rknn import quant_fit
from backends.sdk.errors import TerminalError

_ALGORITHMS = {"minmax": "normal", "entropy": "kl_divergence"}


def quant_plan(config: Mapping[str, Any], target: Any, model: Any) -> tuple[dict[str, Any], list[str]]:
    """The RKNN quantization settings for the spec's section, and notes on every mapping made."""
    from backends.passes.quant import policy as quant_policy

    policy = quant_policy.resolve(config, target)
    notes: list[str] = []
    if policy.mode in ("fp16", "qat"):
        why = (
            "fp16: RKNN's float build is float16"
            if policy.mode == "fp16"
            else "qat: rknn-toolkit2 reads the model's Q/DQ scales and builds its integer layers from them"
        )
        return {"quantize": False, "mode": policy.mode}, [why]
    section = config.get("quantization") or {}
    chip = str(target.extra.get("rknn_platform") or target.id)
    found = quant_fit.errors(section, chip, quant_policy.has_float(target), target.default_activation)
    if found:
        field, message = found[0]
        raise TerminalError(f"{field}: {message}")
    kind = quant_fit.dtype(policy.weights, policy.activations)
    assert kind is not None  # quant_fit.errors refuses the pairs with no dtype
    if policy.activations == "uint8":
        notes.append("activations uint8: RKNN's w8a8 uses asymmetric int8 activations (the same 256 levels)")
    algorithm = _ALGORITHMS.get(policy.method)
    if algorithm is None:
        raise TerminalError(
            f"rknn: calibration.method {policy.method} has no RKNN equivalent (minmax -> normal, entropy -> kl_divergence)"
        )
    plan: dict[str, Any] = {
        "quantize": True,
        "mode": policy.mode,
        "quantized_dtype": kind,
        "quantized_algorithm": algorithm,
        "quantized_method": "channel" if policy.per_channel else "layer",
        "samples": policy.samples,
        "seed": policy.seed,
    }
    rules = policy.sensitive
    kept: dict[str, str] = {}
    if rules is not None and rules.explicit:
        kept = dict(quant_policy.match_rules(model, rules))
        plan["hybrid"] = {
            "custom_hybrid": _hybrid_pairs(model, kept),
            "dtype": _keep_dtype(rules.keep, notes),
        }
        plan["sensitive_nodes"] = sorted(kept)
    if rules is not None and rules.auto is not None:
        plan["auto_hybrid"] = True
        plan["auto_hybrid_cos_thresh"] = quant_fit.AUTO_HYBRID_COS
        plan["auto_mapping"] = quant_fit.auto_hybrid_note(rules)
        notes.append(plan["auto_mapping"])
    elif policy.placement == "target" and quant_policy.has_float(target):
        _keep_tail(plan, model, kept, notes)
    return plan, notes


def _keep_tail(plan: dict[str, Any], model: Any, kept: Mapping[str, str], notes: list[str]) -> None:
    """`placement: target` on RKNN: a tail after the last compute op that joins several tensors (a
    detector's decode concatenating boxes in pixels and scores in 0-1) is asked to stay float16, as
    the QDQ placement keeps it float (backends.passes.quant.qdq_placement): under one int8 scale every
    score of such a concat rounds to zero. The toolkit renames or folds most tensors (shape arithmetic
    becomes constants, fused ops take new names), so the region is anchored where names are likeliest
    to survive: from the outputs of the compute ops (or graph inputs) feeding the tail's data path to
    the graph outputs it makes. The worker keeps it only if the toolkit knows those names, and says
    which (`tail_hybrid` in its result). With `auto` the toolkit's auto_hybrid decides alone."""
    from backends.passes.quant.qdq_placement import data_tail, data_tensors, joining_concats

    if not joining_concats(model):
        return
    data = data_tensors(model)
    by_name = {node.name: node for node in model.graph.node}
    tail = [name for name in data_tail(model) if name not in kept]
    outputs = [o.name for o in model.graph.output if o.name in {t for n in tail for t in by_name[n].output}]
    if not outputs:
        return
    producers = {t: n for n in model.graph.node for t in n.output if t}
    weights = {t.name for t in model.graph.initializer}
    region = set(tail)
    entries = sorted(
        {
            start
            for name in tail
            for t in by_name[name].input
            if t in data and (t not in producers or producers[t].name not in region)
            for start in _anchors(t, producers, weights)
        }
    )
    plan["tail_hybrid"] = {"custom_hybrid": [[e, o] for e in entries for o in outputs], "nodes": tail}
    notes.append(
        f"placement target: the {len(tail)} tail node(s) after the last compute op, which join the "
        "decode's tensors, asked to stay float16 (custom hybrid from the compute outputs feeding them to "
        "the outputs)"
    )


def _anchors(tensor: str, producers: Mapping[str, Any], weights: set[str]) -> set[str]:
    """The compute ops' outputs (or graph inputs) `tensor` is computed from through non-compute nodes:
    names the toolkit keeps."""
    from backends.passes.quant.policy import COMPUTE_OPS

    found: set[str] = set()
    todo, seen = [tensor], set()
    while todo:
        name = todo.pop()
        if name in seen or name in weights:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is None or node.op_type in COMPUTE_OPS:
            found.add(name)
        else:
            todo.extend(t for t in node.input if t)
    return found


def _keep_dtype(keep: str, notes: list[str]) -> str:
    if keep == "int16":
        return "int16"
    if keep == "fp32":
        notes.append("sensitive_layers.keep fp32: RKNN's float layers are float16")
    return "float16"


def _hybrid_pairs(model: Any, kept: Mapping[str, str]) -> list[list[str]]:
    """RKNN custom_hybrid [input tensor, output tensor] per kept node (first activation in, first out)."""
    weights = {t.name for t in model.graph.initializer}
    pairs = []
    for node in model.graph.node:
        if node.name not in kept:
            continue
        activations = [t for t in node.input if t and t not in weights]
        if not activations or not node.output:
            raise TerminalError(
                f"rknn: sensitive node {node.name} has no activation input to anchor hybrid quantization"
            )
        pairs.append([activations[0], node.output[0]])
    return pairs


def calibration_files(
    folder: Path, onnx_path: Path, meta: Mapping[str, Any] | None, count: int, seed: int, out: Path
) -> list[str]:
    """Converts `count` calibration samples to raw NCHW .npy files under `out`; returns dataset.txt lines."""
    import numpy as np

    from backends.passes import data

    specs = B.raw_inputs(data.model_inputs(onnx_path), meta)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, sample in enumerate(
        data.iter_samples(folder, specs, count, seed, "quantization.calibration.data", B.color_of(meta))
    ):
        names = []
        for j, spec in enumerate(specs):
            name = f"calib/{i:05d}_{j}.npy"
            with (out.parent / name).open("wb") as fh:
                np.save(fh, B.to_model_layout(sample.feed[spec.name], spec.name, meta))
            names.append(name)
        lines.append(" ".join(names))
    return lines
