"""The ONNX model onnx2tf converts: converter forms rewritten, names sanitized, channels-last inputs found.

onnx2tf turns every 4-D input channels-last: right for an NCHW model, wrong for one that already takes
NHWC (a Keras export's `[1, 320, 240, 3]` became `[1, 240, 3, 320]`, which no camera frame matches). An
input is channels-last when the graph says so: every consumer, through Casts, is a Transpose with perm
[0, 3, 1, 2] (what Keras exports and npuctl's own preprocess stage write). Those inputs are named to
onnx2tf to keep, and the TFLite's input is checked to have exactly the ONNX shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backends.passes.rewrite.converter_forms import convertible
from backends.tflite.names import Renamed, sanitize

if TYPE_CHECKING:
    import onnx

TO_NCHW = [0, 3, 1, 2]


@dataclass(frozen=True)
class Prepared:
    renamed: Renamed
    channels_last: tuple[str, ...]
    """Graph inputs (new names) the model takes channels-last: onnx2tf keeps their layout."""
    forms: tuple[str, ...]
    """The converter-forms rewrites applied ("explicit_pads x3")."""


def prepare(source: Path, dest: Path, log: Callable[[str], None], skip: tuple[str, ...] = ()) -> Prepared:
    """Writes to `dest` the model onnx2tf gets from `source` (every converter form but those in `skip`)."""
    import onnx

    model, forms = convertible(onnx.load(str(source)), log, skip=skip)
    renamed = sanitize(model)
    if renamed.inputs or renamed.outputs or renamed.nodes:
        log(
            f"names for onnx2tf: {len(renamed.inputs)} inputs, {len(renamed.outputs)} outputs and "
            f"{len(renamed.nodes)} nodes renamed (mapped back to the ONNX names)"
        )
    dest.write_bytes(model.SerializeToString())
    return Prepared(renamed, tuple(channels_last_inputs(model)), tuple(forms))


def channels_last_inputs(model: onnx.ModelProto) -> list[str]:
    """Rank-4 graph inputs whose every consumer, through Casts, is a Transpose to NCHW."""
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits or len(vi.type.tensor_type.shape.dim) != 4:
            continue
        ends = _consumers_through_casts(model, vi.name)
        if ends and all(
            n.op_type == "Transpose"
            and [list(helper.get_attribute_value(a)) for a in n.attribute if a.name == "perm"] == [TO_NCHW]
            for n in ends
        ):
            out.append(vi.name)
    return out


def _consumers_through_casts(model: onnx.ModelProto, tensor: str) -> list[onnx.NodeProto]:
    found: list[onnx.NodeProto] = []
    frontier = [tensor]
    while frontier:
        t = frontier.pop()
        for node in model.graph.node:
            if t not in node.input:
                continue
            if node.op_type == "Cast":
                frontier.extend(node.output)
            else:
                found.append(node)
    return found
