"""Every artifact checked against the model it was made from, before it is recorded.

A compile must not change numerics beyond its precision: the compiled artifact is run through a
runner (benchprog and the one timing harness, as evaluate runs it) on the first few evaluation samples
(random inputs, seed 0, without evaluation data), the source ONNX is run by ONNX Runtime on the same
feeds, and `agreement` compares them. A disagreement beyond the stage's tolerance fails the stage with
one line naming both numbers and the log, so a broken compiler is never reported as an accuracy drop.

`agreement` is the one comparison: every element's error relative to its output channel's range (a
detector's class scores are compared as scores, not drowned by its box coordinates, which is how a
score collapse hides under a cosine of 0.999), never taken below what the source's own int8 grid can
represent there (QUANTIZED_STEPS steps of the output's quantization scale: a near-empty heatmap row is
not a channel whose one rounding step is its whole range), plus the fidelity measures of backends.passes.accuracy
(cosine, SQNR) for the report. The tolerance holds for the 99th percentile of those errors (BULK), and
the single worst element is reported beside it: an integer compiler may round one pixel of a map
across a sigmoid's steep middle (the HTP's PP-OCR detector: one element of 40,000 off by 0.82 of its
range, the rest within 0.02), while a broken compile (a score collapse, a wrong channel) moves far more
than one element in a hundred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

    from backends.passes.accuracy import ModelOutputs
    from backends.passes.data import Sample
    from backends.sdk.base import StageRequest

CHECK_SAMPLES = 4
BULK = 0.99
"""The share of elements the tolerance holds for (per output, over the check's samples)."""

FLOAT_TOLERANCE = 1e-3
"""fp32 compile of a float model: only reassociation and fused kernels may differ."""
HALF_TOLERANCE = 3e-2
"""fp16 / bf16 inference precision: about 3 significant digits per op, accumulated over the graph."""
QUANTIZED_TOLERANCE = 0.25
"""A Q/DQ model compiled to integer kernels: requantization may round each layer differently (a few
quantization steps), never by a large part of a channel's range. Measured: OpenVINO's int8 kernels
against ONNX Runtime on an NNCF-quantized YOLOX (global min/max ranges) differ by at most 0.16 of a box
channel's range at box F1 0.986 between them; the score collapse this check exists for moves scores by
over half their range. The one figure: docs/how-it-works.md states it from here."""
QUANTIZED_STEPS = 1 / QUANTIZED_TOLERANCE
"""No channel's scale is taken below this many steps of its output's quantization scale: an element one
int8 step off its QDQ math is then at most QUANTIZED_TOLERANCE of the scale it is judged against."""


def has_qdq(model: Path) -> bool:
    """Whether the source is a QDQ model: its compiled form runs integer kernels, which round a
    requantized output one step off its QDQ math (the reference run_source computes)."""
    from backends.passes.facts import load_light  # the graph only: no copy of a large model's weights

    return any(n.op_type == "QuantizeLinear" for n in load_light(model).graph.node)


def tolerance(precision: str, quantized: bool) -> float:
    """The compile stage's tolerance for an artifact run at `precision` (f32, f16, bf16)."""
    if quantized:
        return QUANTIZED_TOLERANCE
    return FLOAT_TOLERANCE if precision in ("f32", "fp32", "float32") else HALF_TOLERANCE


@dataclass(frozen=True)
class Agreement:
    bulk: float
    """The BULK quantile of |artifact - source| / the channel's max |source|, in the worst output."""
    worst: float
    """max |artifact - source| over the worst channel, over that channel's max |source|."""
    output: str
    channel: int
    artifact_value: float
    source_value: float
    """The two values where the worst difference is."""
    cosine: float
    sqnr_db: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "bulk_channel_error": self.bulk,
            "bulk_quantile": BULK,
            "worst_channel_error": self.worst,
            "output": self.output,
            "channel": self.channel,
            "artifact_value": self.artifact_value,
            "source_value": self.source_value,
            "cosine": self.cosine,
            "sqnr_db": self.sqnr_db,
            "samples": self.samples,
        }


def channel_axis(shape: Sequence[int]) -> int | None:
    """The axis of an output's shape (batch included) whose entries are channels, None for one channel.
    Rank 4 and up is ONNX's NC...: axis 1, whatever its size ([1, 1, H, W] is one channel, not H of
    them). Rank 3 is a table of rows: the shorter of its two axes after the batch ([1, N, 5+C] -> the
    5+C axis, [1, 4+C, N] -> the 4+C axis). Rank 2 is [N, C]."""
    if len(shape) >= 4:
        axis = 1
    elif len(shape) == 3:
        axis = 1 if shape[1] <= shape[2] else 2
    elif len(shape) == 2:
        axis = 1
    else:
        return None
    return axis if shape[axis] > 1 else None


def output_steps(model: Path) -> dict[str, float]:
    """Each graph output's int8 step in a Q/DQ model: the largest scale of the DequantizeLinear that
    produces it (outputs not produced by one are absent: they are float)."""
    from onnx import numpy_helper

    from backends.passes.facts import load_light

    graph = load_light(model).graph
    producers = {o: n for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    out: dict[str, float] = {}
    for value in graph.output:
        node = producers.get(value.name)
        if node is None or node.op_type != "DequantizeLinear":
            continue
        scale = node.input[1]
        if scale in inits and inits[scale].data_location != 1:
            out[value.name] = float(numpy_helper.to_array(inits[scale]).max())
        elif scale in consts:
            out[value.name] = float(numpy_helper.to_array(consts[scale].attribute[0].t).max())
    return out


def _errors(ref: np.ndarray, out: np.ndarray, step: float = 0.0) -> tuple[float, float, int, float, float]:
    """(BULK quantile, worst, the worst's channel, artifact value, source value); `step` is the output's
    int8 step in a quantized source (0: float)."""
    import numpy as np

    axis = channel_axis(ref.shape[1:])
    axis = axis + 1 if axis is not None else None  # ref is [samples, *shape]
    diff = np.abs(out - ref)
    floor = max(float(np.abs(ref).max()) * 1e-3, QUANTIZED_STEPS * step, 1e-12)
    if axis is None:
        scale = np.full(ref.shape, max(float(np.abs(ref).max()), floor))
    else:
        others = tuple(a for a in range(ref.ndim) if a != axis)
        scale = np.maximum(np.abs(ref).max(axis=others, keepdims=True), floor)
    relative = diff / scale
    where = np.unravel_index(int(np.argmax(relative)), relative.shape)
    channel = int(where[axis]) if axis is not None else 0
    bulk = float(np.quantile(relative, BULK))
    return bulk, float(relative[where]), channel, float(out[where]), float(ref[where])


def agreement(
    reference: ModelOutputs, outputs: ModelOutputs, steps: Mapping[str, float] | None = None
) -> Agreement:
    """How closely `outputs` (the artifact) follow `reference` (its source), same samples and order;
    `steps` is each output's int8 step in a quantized source (output_steps)."""
    import numpy as np

    from backends.passes.accuracy import fidelity
    from backends.passes.metrics import as_float

    if len(reference.values) != len(outputs.values) or not reference.values:
        raise TerminalError(
            f"the artifact returned {len(outputs.values)} samples, its source {len(reference.values)}"
        )
    best = (-1.0, -1.0, "", 0, 0.0, 0.0)
    for index, name in enumerate(reference.names):
        ref = np.stack([as_float(v[index]).astype(np.float64) for v in reference.values])
        out = np.stack([as_float(v[index]).astype(np.float64) for v in outputs.values])
        if ref.shape != out.shape:
            raise TerminalError(
                f"output {name}: the artifact gives shape {list(out.shape[1:])}, its source {list(ref.shape[1:])}"
            )
        bulk, worst, channel, got, want = _errors(ref, out, (steps or {}).get(name, 0.0))
        bulk, worst = (v if np.isfinite(v) else float("inf") for v in (bulk, worst))
        if (bulk, worst) > best[:2]:
            best = (bulk, worst, name, channel, got, want)
    fid = fidelity(reference.values, outputs.values, reference.names)
    return Agreement(*best, fid.cosine, fid.sqnr_db, fid.samples)


def check_samples(request: StageRequest, inputs: Any, count: int = CHECK_SAMPLES) -> tuple[list[Sample], str]:
    """The first `count` evaluation samples, or random inputs (seed 0) without evaluation data."""
    from backends.passes.data import random_samples, sample_set

    folder = request.inputs.get("eval_data")
    if folder is None:
        return random_samples(inputs, count, seed=0), "random inputs (seed 0)"
    found = list(islice(iter(sample_set(Path(folder), inputs, role="evaluate.data")), count))
    return found, f"the first {len(found)} samples of evaluate.data"


def require(found: Agreement, limit: float, what: str, data: str, log: Path) -> dict[str, Any]:
    """The check's record for the report; a TerminalError when the artifact disagrees."""
    record = {**found.as_dict(), "tolerance": limit, "data": data, "agrees": found.bulk <= limit}
    if found.bulk > limit:
        raise TerminalError(
            f"{what} disagrees with the model it was compiled from on {data}: output {found.output}'s "
            f"elements differ by {found.bulk:.3g} of their channel's range at the {BULK:.0%} quantile "
            f"(tolerance {limit:g}); worst: channel {found.channel} gives {found.artifact_value:.6g} where the "
            f"source gives {found.source_value:.6g} ({found.worst:.3g} of the channel's range); cosine {found.cosine:.6f}; log {log}"
        )
    return record


def run_source(model: Path, samples: Sequence[Sample]) -> ModelOutputs:
    """The source ONNX under ONNX Runtime (the reference every artifact is compared with)."""
    from backends.passes.accuracy import run_model

    return run_model(model, samples)


def runner_outputs(job: Path, result: dict[str, Any]) -> ModelOutputs:
    """The artifact's outputs as the runner wrote them into its job folder."""
    from backends.sdk.measure import read_outputs

    return read_outputs(job, result)
