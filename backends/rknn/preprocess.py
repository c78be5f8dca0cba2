"""RKNN's own preprocess stage: the NPU normalizes, the graph keeps a float NCHW input.

rknn-toolkit2 aborts on an ONNX model whose input is uint8 ("Not Support Dtype: 2", exit 134), so the
shared pass (which folds the cast, layout change and normalization into the graph) cannot feed it.
RKNN has its own form instead: the runtime takes the raw uint8 NHWC frame and applies
`(x - mean_values) / std_values` per channel on the NPU (rknn.config). This stage therefore:

- keeps the graph's input float NCHW, unnormalized by the graph;
- folds a BGR<->RGB swap into the graph (permuting the input channels of the Conv weights the input
  feeds, or a Gather when the input feeds anything else), since RKNN has no runtime channel swap;
- records RKNN's mean/std (in the application's channel order) and the runtime input contract as
  ONNX metadata (`npuctl.rknn.preprocess`), which the quantize/compile/evaluate stages read.

The output is also the float reference evaluate compares against: it takes `(raw - mean) / std` in NCHW.
Resize cannot be expressed in RKNN's form and is refused with a clear error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx

META_KEY = "npuctl.rknn.preprocess"


def rknn_mean_std(section: Mapping[str, Any], channels: int) -> tuple[list[float], list[float]]:
    """Canonical mean/std (model channel order) -> RKNN mean_values/std_values in the order the
    application feeds channels, through the shared conversion (backends.passes.preprocess.forms)."""
    from backends.passes.preprocess import forms as forms

    form = forms.canonical(section, channels)
    if len(form.mean) != channels or len(form.std) != channels:
        raise TerminalError(
            f"preprocess.mean/std have {len(form.mean)}/{len(form.std)} values; the input has {channels} channels"
        )
    args = forms.rknn_form(form)
    return [float(v) for v in args["mean_values"][0]], [float(v) for v in args["std_values"][0]]


def _swap_wanted(color: Mapping[str, Any] | None) -> bool:
    if not color:
        return False
    src, dst = color.get("from", "bgr"), color.get("to", "rgb")
    if src == dst:
        return False
    if {src, dst} == {"rgb", "bgr"}:
        return True
    raise TerminalError(f"rknn: preprocess.color {src} -> {dst} cannot be folded (only rgb <-> bgr)")


def fold_channel_swap(model: onnx.ModelProto, input_name: str) -> str:
    """Reverses the channel axis of `input_name` inside the graph; returns how ("conv-weights"/"gather")."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    consumers = [n for n in graph.node if input_name in n.input]
    inits = {t.name: t for t in graph.initializer}
    convs_only = bool(consumers) and all(
        n.op_type == "Conv"
        and list(n.input).index(input_name) == 0
        and len(n.input) > 1
        and n.input[1] in inits
        for n in consumers
    )
    if convs_only:
        for node in consumers:
            weight = numpy_helper.to_array(inits[node.input[1]])
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if weight.ndim != 4 or weight.shape[1] != 3 or group != 1:
                convs_only = False
                break
    if convs_only:
        for node in consumers:
            weight = numpy_helper.to_array(inits[node.input[1]])
            name = f"{node.input[1]}__rknn_channel_swap"
            if name not in inits:
                swapped = numpy_helper.from_array(np.ascontiguousarray(weight[:, ::-1]), name)
                graph.initializer.append(swapped)
                inits[name] = swapped
            node.input[1] = name
        return "conv-weights"
    swapped_name = f"{input_name}__rknn_channel_swap"
    index = numpy_helper.from_array(np.array([2, 1, 0], dtype=np.int64), f"{swapped_name}_indices")
    graph.initializer.append(index)
    for node in consumers:
        for i, name in enumerate(node.input):
            if name == input_name:
                node.input[i] = swapped_name
    gather = helper.make_node("Gather", [input_name, index.name], [swapped_name], axis=1, name=swapped_name)
    graph.node.insert(0, gather)
    onnx.checker.check_model(model)
    return "gather"


def input_channels(model: onnx.ModelProto, name: str) -> list[int]:
    for value in model.graph.input:
        if value.name == name:
            return [d.dim_value for d in value.type.tensor_type.shape.dim]
    raise TerminalError(f"preprocess.input {name!r} is not a model input")


def prepare(model: onnx.ModelProto, section: Mapping[str, Any]) -> dict[str, Any]:
    """Applies RKNN's preprocess form to `model` in place; returns the metadata it records."""
    if section.get("resize"):
        raise TerminalError(
            "rknn: preprocess.resize cannot run inside an RKNN model (RKNN normalizes but does not resize); "
            "resize in the application or remove preprocess.resize"
        )
    weights = {t.name for t in model.graph.initializer}
    graph_inputs = [v.name for v in model.graph.input if v.name not in weights]
    name = section.get("input") or graph_inputs[0]
    shape = input_channels(model, name)
    if len(shape) != 4:
        raise TerminalError(f"rknn: preprocess needs a 4-D NCHW input; {name} has shape {shape}")
    channels = shape[1]
    swap = _swap_wanted(section.get("color"))
    folded = fold_channel_swap(model, name) if swap else "none"
    mean, std = rknn_mean_std(section, channels)
    color = section.get("color") or {}
    return {
        "format_version": 1,
        "input": name,
        "model_shape": shape,
        "layout": section.get("layout", "nhwc"),
        "dtype": section.get("dtype", "uint8"),
        "color_from": color.get("from"),
        "color_to": color.get("to"),
        "color_folded": folded,
        "mean_values": mean,
        "std_values": std,
    }


def read_meta(model: onnx.ModelProto | Path) -> dict[str, Any] | None:
    """The RKNN preprocess record of a model, or None when it has none (no preprocess section)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False) if isinstance(model, Path) else model
    for prop in proto.metadata_props:
        if prop.key == META_KEY:
            data: dict[str, Any] = json.loads(prop.value)
            return data
    return None


class RknnPreprocess:
    """Stage "preprocess" for RKNN targets (see the module docstring)."""

    stage = "preprocess"

    def fingerprint(self) -> dict[str, str]:
        from backends.passes.importer import dist_version

        return {"onnx": dist_version("onnx")}

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        section = request.config.get("preprocess")
        if not section:
            raise TerminalError("preprocess: no preprocess section (the engine should not call this stage)")
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("preprocess: no model input")
        model = onnx.load(str(source), load_external_data=False)
        meta = prepare(model, section)
        for prop in list(model.metadata_props):
            if prop.key == META_KEY:
                model.metadata_props.remove(prop)
        entry = model.metadata_props.add()
        entry.key, entry.value = META_KEY, json.dumps(meta, sort_keys=True)
        out = request.workdir / "model.onnx"
        onnx.save(model, str(out))
        request.log.parent.mkdir(parents=True, exist_ok=True)
        request.log.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        note = f"rknn form: mean {meta['mean_values']}, std {meta['std_values']} on the NPU; colour swap {meta['color_folded']}"
        return StageOutput(artifacts={"model": out}, report={"rknn_preprocess": meta}, note=note)
