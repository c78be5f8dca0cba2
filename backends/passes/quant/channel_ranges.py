"""The per-channel range check: activations whose channels span ranges far apart under one scale.

An activation is quantized with one scale per tensor (ONNX Runtime, NNCF and the NPU compilers here
all do), so when one channel spans 60x the range of another, the narrow channel keeps a few integer
levels out of 256. Weights have per-channel scales already; activations do not. The check runs the
float (prepared) model on a few calibration samples and, for every activation a compute op reads in
integer (Conv / ConvTranspose: the channel axis 1; MatMul / Gemm: the feature axis), compares the
widest live channel with the narrowest. It reports; it does not change the build: keeping each such
layer float would undo int8 on most detectors (a third of YOLOX's conv inputs are over 16x), so the fix
is suggested, and the auto search measures those layers with the task metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.passes.quant.policy import spec_name

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes.data import Sample

FACTOR = 16.0
"""Widest / narrowest channel range above which the narrow channel keeps at most 256 / 16 = 16 levels."""
SAMPLES = 4
"""Calibration samples the check runs the float model on (ranges only grow with more)."""
DUST = 1e-6
"""A channel narrower than this share of the widest holds float dust (a Relu's or HardSwish's leftovers,
~1e-12), not values: it loses nothing under any scale, and would make ratios like 1e14."""
NOTE_LIMIT = 3
"""Tensors named in the stage note (the report holds all of them)."""

AXES = {"Conv": 1, "ConvTranspose": 1, "MatMul": -1, "Gemm": -1}
"""Compute op -> the channel axis of its data input (input 0)."""


@dataclass(frozen=True)
class Spread:
    tensor: str
    consumer: str
    """The compute node that reads the tensor in integer."""
    channels: int
    ratio: float
    """Widest / narrowest live channel range (channels under DUST of the widest left out)."""
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "consumer": spec_name(self.consumer),
            "channels": self.channels,
            "ratio": round(self.ratio, 2),
            "fix": self.fix,
        }


def fix_text(float_ok: bool) -> str:
    if float_ok:
        return (
            "suggested: keep its consumer float (sensitive_layers) if the task metric drops; "
            "sensitive_layers.auto measures it"
        )
    return "suggested: equalize its channels before quantization (cross-layer equalization)"


def read_in_integer(
    model: onnx.ModelProto, op_types: Sequence[str], float_nodes: Mapping[str, str]
) -> dict[str, tuple[str, int]]:
    """Activation tensor -> (compute node, channel axis) for every data input a compute op quantizes."""
    constants = {t.name for t in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    found: dict[str, tuple[str, int]] = {}
    for node in model.graph.node:
        axis = AXES.get(node.op_type)
        if axis is None or node.op_type not in op_types or node.name in float_nodes:
            continue
        if node.input and node.input[0] not in constants:
            found.setdefault(node.input[0], (node.name, axis))
    return found


def check(
    model: onnx.ModelProto,
    samples: Sequence[Sample],
    op_types: Sequence[str],
    float_nodes: Mapping[str, str],
    float_ok: bool,
) -> list[Spread]:
    """Every activation read in integer whose channels' ranges are over FACTOR apart, widest first."""
    import numpy as np

    from backends.passes.quant.points import float_values

    wanted = read_in_integer(model, op_types, float_nodes)
    if not wanted or not samples:
        return []
    low: dict[str, np.ndarray] = {}
    high: dict[str, np.ndarray] = {}
    for values in float_values(model, sorted(wanted), samples[:SAMPLES]):
        for name, value in values.items():
            if value.ndim < 2 or value.dtype.kind != "f":
                continue
            axis = wanted[name][1] % value.ndim
            rows = np.moveaxis(value, axis, 0).reshape(value.shape[axis], -1)
            lo, hi = rows.min(axis=1), rows.max(axis=1)
            low[name] = np.minimum(low[name], lo) if name in low else lo
            high[name] = np.maximum(high[name], hi) if name in high else hi
    fix = fix_text(float_ok)
    out = []
    for name in sorted(low):
        widths = np.maximum(high[name], 0.0) - np.minimum(low[name], 0.0)
        live = widths[widths > widths.max() * DUST]
        if live.size < 2:
            continue
        ratio = float(live.max() / live.min())
        if ratio > FACTOR:
            out.append(Spread(name, wanted[name][0], int(widths.size), ratio, fix))
    return sorted(out, key=lambda s: (-s.ratio, s.tensor))


def note(rows: Sequence[Mapping[str, Any]]) -> str:
    """`channel ranges: 26 activations over 16x apart (worst 845 into Conv_50: 61x ...); suggested ...`."""
    if not rows:
        return ""
    worst = ", ".join(
        f"{r['tensor']} into {r['consumer']}: {float(r['ratio']):.0f}x" for r in rows[:NOTE_LIMIT]
    )
    more = f", {len(rows) - NOTE_LIMIT} more in the report" if len(rows) > NOTE_LIMIT else ""
    return (
        f"channel ranges: {len(rows)} activation{'s' if len(rows) != 1 else ''} with channels over "
        f"{FACTOR:.0f}x apart under one scale ({worst}{more}), {rows[0]['fix']}"
    )
