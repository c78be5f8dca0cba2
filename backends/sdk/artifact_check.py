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

An int8 build is compared with its Q/DQ source, which ONNX Runtime runs with its own integer rounding:
the two integer implementations may round a layer differently and the differences compound, so an NPU
build can miss the source by more than the tolerance while following the float model as closely as the
source does. `check` therefore judges an int8 build that misses against the float model it was
quantized from, beside the Q/DQ source on ONNX Runtime's CPU (the CPU int8 model): it passes when it is
not materially worse (FLOAT_MARGIN), and fails naming both figures otherwise. Where the CPU int8 model
is itself far from the float one this cannot tell a good build from a bad one: the quantize stage's own
check against the float model owns that.
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
FLOAT_MARGIN = 1.5
"""How much worse than the CPU int8 model an integer build may follow the float model and still pass
(AgainstFloat): a factor on the channel-relative error at the BULK quantile, and on the noise amplitude
(20 log10 1.5 = 3.5 dB of SQNR). Measured: builds two integer implementations round differently land
near 1 (the HTP's PP-OCRv4 det 0.82 of the CPU int8 model's error, its PicoDet layout 0.98 at box F1
1.0, OpenVINO's PP-OCRv5 det 1.0); the HTP's builds this margin rejects are 2.7 times (a 4-class
classifier whose background classes move 2.7 times as far from float over 6 samples, SQNR 2.7 dB below)
and 17 times (a YOLOX head 8 int8 steps off on a whole objectness channel where the CPU int8 model is
exact) as far; a score collapse is many times."""
QUANTIZED_STEPS = 1 / QUANTIZED_TOLERANCE
"""No channel's scale is taken below this many steps of its output's quantization scale: an element one
int8 step off its QDQ math is then at most QUANTIZED_TOLERANCE of the scale it is judged against."""


def quantized_source(model: Path) -> bool:
    """Whether the source is quantized (Q/DQ nodes, or integer operators such as a dynamically
    quantized export's: backends.passes.quantized): its compiled form runs integer kernels, which round
    a requantized output a step off the source's math (the reference run_source computes), so it is
    judged at the quantized tolerance whatever the spec's mode."""
    from backends.passes.facts import load_light  # the graph only: no copy of a large model's weights
    from backends.passes.quantized import quantized

    return quantized(n.op_type for n in load_light(model).graph.node) is not None


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


PASS_THROUGH = frozenset(
    {
        "Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
        "Slice", "Gather", "GatherElements", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
        "Resize", "Upsample", "MaxPool", "GlobalMaxPool", "Relu", "LeakyRelu", "Clip", "Max", "Min",
    }
)  # fmt: skip
"""Float ops after a graph's last DequantizeLinear that keep its grid: they move, copy, select or clip
its values (a monotonic piecewise-linear map of slope at most 1), so an element one step off before
them is at most one step off after them."""

BOUNDED = {"Sigmoid": 1.0, "HardSigmoid": 1.0, "Softmax": 1.0, "Tanh": 2.0}
"""Float ops after the last DequantizeLinear whose output spans a fixed range (its width here): an
integer compiler runs them with an int8 output grid over that range, so one step of it is 1/255 of the
width, whatever their input's step."""


def output_steps(model: Path) -> dict[str, float]:
    """Each graph output's int8 step in a Q/DQ model: the largest scale of the DequantizeLinear that
    produces it, or of the nearest ones upstream through PASS_THROUGH ops, or one int8 step of a
    BOUNDED op's range where one is on the way (a float Sigmoid after the last DequantizeLinear: its
    near-empty map is judged on what an int8 grid over [0, 1] can represent, never on its own 1e-6).
    Outputs reached otherwise (float arithmetic: Exp, MatMul ...) are absent: they are judged as float."""
    from onnx import numpy_helper

    from backends.passes.facts import load_light

    graph = load_light(model).graph
    producers = {o: n for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}

    def scale_of(name: str) -> float | None:
        if name in inits and inits[name].data_location != 1:
            return float(numpy_helper.to_array(inits[name]).max())
        if name in consts:
            return float(numpy_helper.to_array(consts[name].attribute[0].t).max())
        return None

    def step(value: str, depth: int = 0) -> float | None:
        node = producers.get(value)
        if node is None or depth > 64:
            return None
        if node.op_type == "DequantizeLinear":
            return scale_of(node.input[1])
        if node.op_type in BOUNDED:
            return BOUNDED[node.op_type] / 255
        if node.op_type not in PASS_THROUGH:
            return None
        traced = node.input if node.op_type == "Concat" else node.input[:1]
        found = [step(i, depth + 1) for i in traced if i]
        known = [f for f in found if f is not None]
        return max(known) if known and len(known) == len(found) else None

    out: dict[str, float] = {}
    for value in graph.output:
        found = step(value.name)
        if found is not None:
            out[value.name] = found
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
    """The strict comparison alone: the check's record for the report; a TerminalError when the
    artifact disagrees with its source beyond `limit`."""
    record = {**found.as_dict(), "tolerance": limit, "data": data, "agrees": found.bulk <= limit}
    if found.bulk > limit:
        raise TerminalError(f"{_disagrees(found, limit, what, data)}; log {log}")
    return record


def _disagrees(found: Agreement, limit: float, what: str, data: str) -> str:
    return (
        f"{what} disagrees with the model it was compiled from on {data}: output {found.output}'s "
        f"elements differ by {found.bulk:.3g} of their channel's range at the {BULK:.0%} quantile "
        f"(tolerance {limit:g}); worst: channel {found.channel} gives {found.artifact_value:.6g} where the "
        f"source gives {found.source_value:.6g} ({found.worst:.3g} of the channel's range); cosine {found.cosine:.6f}"
    )


@dataclass(frozen=True)
class AgainstFloat:
    """The artifact and the CPU int8 model (its Q/DQ source under ONNX Runtime's CPU kernels), each
    compared with the float model the source was quantized from, on the same samples and with the same
    channel-relative errors and step floors."""

    artifact: Agreement
    cpu: Agreement

    @property
    def holds(self) -> bool:
        """The artifact is not materially worse than the CPU int8 model (FLOAT_MARGIN): its bulk
        channel error at most FLOAT_MARGIN times the CPU model's, and its noise amplitude too (SQNR at
        most 20 log10 FLOAT_MARGIN dB below), the SQNR judged only where the CPU model's is positive
        (its int8 grid resolves the output's signal at all: a near-empty map is judged by its
        channel error alone)."""
        import math

        if not self.artifact.bulk <= FLOAT_MARGIN * self.cpu.bulk:
            return False
        return self.cpu.sqnr_db <= 0 or self.artifact.sqnr_db >= self.cpu.sqnr_db - 20 * math.log10(
            FLOAT_MARGIN
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact.as_dict(),
            "cpu_int8": self.cpu.as_dict(),
            "margin": FLOAT_MARGIN,
            "holds": self.holds,
        }

    def describe(self) -> str:
        a, c = self.artifact, self.cpu
        return (
            f"against the float model the artifact errs {a.bulk:.3g} of the channel's range at the {BULK:.0%} "
            f"quantile (output {a.output}; SQNR {a.sqnr_db:.1f} dB, cosine {a.cosine:.4f}), the CPU int8 model "
            f"{c.bulk:.3g} (output {c.output}; SQNR {c.sqnr_db:.1f} dB, cosine {c.cosine:.4f}); allowed "
            f"{FLOAT_MARGIN:g}x the CPU int8 model's error"
        )


def against_float(
    float_outputs: ModelOutputs, cpu: ModelOutputs, outputs: ModelOutputs, steps: Mapping[str, float]
) -> AgainstFloat:
    """The artifact's and the CPU int8 model's agreement with the float model (same samples)."""
    return AgainstFloat(agreement(float_outputs, outputs, steps), agreement(float_outputs, cpu, steps))


def judge(
    request: StageRequest,
    source: Path,
    samples: Sequence[Sample],
    outputs: ModelOutputs,
    limit: float,
    what: str,
    data: str,
    reference: ModelOutputs | None = None,
) -> dict[str, Any]:
    """The compile check on a stage's request (its float_model input and log); see check."""
    float_model = request.inputs.get("float_model")
    return check(source, float_model, samples, outputs, Check(limit, what, data, request.log), reference)


@dataclass(frozen=True)
class Check:
    """What a compile check is held to and how its failure is told."""

    limit: float
    what: str
    """The artifact, as the failure line names it ("qnn compile: the context model on ...")."""
    data: str
    log: Path


def check(
    source: Path,
    float_model: Path | None,
    samples: Sequence[Sample],
    outputs: ModelOutputs,
    how: Check,
    reference: ModelOutputs | None = None,
) -> dict[str, Any]:
    """The compile check: `outputs` (the artifact on `samples`) against `source` under ONNX Runtime
    (`reference`: that run, when the caller made it) within the limit; then, for a Q/DQ source that
    misses it, the rule that decides: a build that agrees with `float_model` (the model the source
    was quantized from) as well as the CPU int8 model does passes (AgainstFloat), since the integer
    kernels of a CPU and of an NPU round differently and neither is the truth; otherwise the stage
    fails with one line naming both comparisons. The record keeps whichever decided."""
    steps = output_steps(source)
    reference = reference if reference is not None else run_source(source, samples)
    found = agreement(reference, outputs, steps)
    if found.bulk <= how.limit or float_model is None or not quantized_source(source):
        return require(found, how.limit, how.what, how.data, how.log)
    fidelity = against_float(run_source(Path(float_model), samples), reference, outputs, steps)
    if not fidelity.holds:
        line = _disagrees(found, how.limit, how.what, how.data)
        raise TerminalError(f"{line}; {fidelity.describe()}; log {how.log}")
    record = {**found.as_dict(), "tolerance": how.limit, "data": how.data, "agrees": True}
    return {**record, "against_float": fidelity.as_dict()}


def summary(record: Mapping[str, Any]) -> str:
    """The check's record in a few words for a stage's note."""
    line = (
        f"agrees with its source within {record['bulk_channel_error']:.2g} of each channel's range for "
        f"{BULK:.0%} of elements (tolerance {record['tolerance']:g}; worst {record['worst_channel_error']:.2g})"
    )
    fidelity = record.get("against_float")
    if fidelity:
        art, cpu = fidelity["artifact"], fidelity["cpu_int8"]
        line = (
            f"agrees with the float model as the CPU int8 model does ({art['bulk_channel_error']:.3g} of each "
            f"channel's range against {cpu['bulk_channel_error']:.3g}, SQNR {art['sqnr_db']:.1f} dB against "
            f"{cpu['sqnr_db']:.1f}; within {FLOAT_MARGIN:g}x); with its int8 source within "
            f"{record['bulk_channel_error']:.3g} (tolerance {record['tolerance']:g})"
        )
    return line


def run_source(model: Path, samples: Sequence[Sample]) -> ModelOutputs:
    """The source ONNX under ONNX Runtime (the reference every artifact is compared with)."""
    from backends.passes.accuracy import run_model

    return run_model(model, samples)


def runner_outputs(job: Path, result: dict[str, Any]) -> ModelOutputs:
    """The artifact's outputs as the runner wrote them into its job folder."""
    from backends.sdk.measure import read_outputs

    return read_outputs(job, result)
