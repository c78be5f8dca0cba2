"""The one accuracy implementation: evaluate, the quantize stage's sensitive-layer search and the SLOs
all score a model the same way.

With labels it is task accuracy (top-1 or top-5 of the first output). Without labels it is fidelity
to the float model, measured the way the first output is read (`fidelity_measure`): top-1 agreement
for class scores, which catches what cosine similarity hides (a detector whose class scores round
to 0/1 keeps cosine 0.9993 at 39 % class agreement); the IoU of the binarized maps for a dense
single-channel map (a text or segmentation probability map, where an argmax over a spatial axis
means nothing); cosine similarity for anything else. Mean cosine and SQNR are always reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from backends.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

    from backends.onnx.data import Sample

Metric = Literal["top1", "top5", "fidelity"]
SampleOutputs = Sequence[Sequence[Any]]
"""Per sample, per output: the arrays `session.run(None, feed)` returns."""

SQNR_CAP_DB = 200.0
"""SQNR is clamped to +-200 dB (identical outputs would be +inf): JSON-safe, and far above the ~150 dB
float32 rounding floor, so the clamp never hides a real difference."""


def _as_float(x: Any) -> np.ndarray:
    import numpy as np

    return np.asarray(x, dtype=np.float64)


def _squeeze_trailing(arr: np.ndarray) -> np.ndarray:
    while arr.ndim > 1 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    return arr


def _score_vector(output: Any, index: int) -> np.ndarray:
    import numpy as np

    arr = np.squeeze(_as_float(output))
    if arr.ndim != 1:
        raise TerminalError(
            f"task accuracy needs one score vector per sample; sample {index} has scores of shape "
            f"{list(np.shape(output))} (evaluate without labels to measure fidelity instead)"
        )
    return arr


def task_accuracy(outputs: Sequence[Any], labels: Sequence[int], metric: Metric = "top1") -> float:
    """Fraction of samples whose label is the top-1 (or among the top-5) score.

    `outputs` holds one score array per sample (the first model output, any shape that squeezes to
    one vector: [1, C], [1, C, 1, 1]). Ties go to the lower class index.
    """
    import numpy as np

    if metric not in ("top1", "top5"):
        raise TerminalError(f"task accuracy metric must be top1 or top5, got {metric!r}")
    if len(outputs) != len(labels):
        raise TerminalError(f"{len(outputs)} outputs but {len(labels)} labels")
    if not outputs:
        raise TerminalError("task accuracy needs at least one sample")
    scores = [_score_vector(out, i) for i, out in enumerate(outputs)]
    classes = {s.shape[0] for s in scores}
    if len(classes) != 1:
        raise TerminalError(f"samples have different class counts: {sorted(classes)}")
    matrix = np.stack(scores)
    k = 1 if metric == "top1" else min(5, matrix.shape[1])
    top = np.argsort(-matrix, axis=1, kind="stable")[:, :k]
    hits = (top == np.asarray(labels, dtype=np.int64)[:, None]).any(axis=1)
    return float(hits.mean())


@dataclass(frozen=True)
class OutputFidelity:
    name: str
    top1_agreement: float | None
    """Agreement of the argmax over the last axis (trailing 1-dims squeezed), over every position and
    sample; None when that axis has one element."""
    cosine: float
    """Mean over samples of the cosine similarity of the flattened outputs."""
    sqnr_db: float
    """10*log10(sum ref^2 / sum (ref - out)^2) over all samples, clamped to +-SQNR_CAP_DB."""


@dataclass(frozen=True)
class Fidelity:
    """Per-output fidelity plus an aggregate: mean top-1 agreement (over outputs where defined), mean
    cosine, and the worst (minimum) SQNR."""

    outputs: list[OutputFidelity]
    top1_agreement: float | None
    cosine: float
    sqnr_db: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "top1_agreement": self.top1_agreement,
            "cosine": self.cosine,
            "sqnr_db": self.sqnr_db,
            "outputs": [
                {"name": o.name, "top1_agreement": o.top1_agreement, "cosine": o.cosine, "sqnr_db": o.sqnr_db}
                for o in self.outputs
            ],
        }


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    import numpy as np

    a, b = a.reshape(-1), b.reshape(-1)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def sqnr_db(reference: Sequence[Any], outputs: Sequence[Any]) -> float:
    """Signal-to-quantization-noise ratio in dB over all given arrays, clamped to +-SQNR_CAP_DB."""
    signal = sum(float((_as_float(r) ** 2).sum()) for r in reference)
    noise = sum(
        float(((_as_float(r) - _as_float(o)) ** 2).sum()) for r, o in zip(reference, outputs, strict=True)
    )
    if not (math.isfinite(signal) and math.isfinite(noise)):
        return -SQNR_CAP_DB
    if noise == 0.0:
        return SQNR_CAP_DB
    if signal == 0.0:
        return -SQNR_CAP_DB
    return float(max(-SQNR_CAP_DB, min(SQNR_CAP_DB, 10.0 * math.log10(signal / noise))))


def top1_agreement(reference: Sequence[Any], outputs: Sequence[Any]) -> float | None:
    """Fraction of positions where argmax over the last axis agrees, over all given arrays."""
    import numpy as np

    agree, total = 0, 0
    for r, o in zip(reference, outputs, strict=True):
        ra, oa = _squeeze_trailing(_as_float(r)), _squeeze_trailing(_as_float(o))
        if ra.ndim == 0 or ra.shape[-1] <= 1:
            return None
        equal = np.argmax(ra, axis=-1) == np.argmax(oa, axis=-1)
        agree += int(equal.sum())
        total += int(equal.size)
    return agree / total if total else None


def fidelity(
    reference_outputs: SampleOutputs, outputs: SampleOutputs, names: Sequence[str] | None = None
) -> Fidelity:
    """How closely `outputs` follow `reference_outputs` (same samples, same output order)."""
    if len(reference_outputs) != len(outputs):
        raise TerminalError(
            f"{len(outputs)} samples compared with {len(reference_outputs)} reference samples"
        )
    if not outputs:
        raise TerminalError("fidelity needs at least one sample")
    count = len(reference_outputs[0])
    if any(len(s) != count for s in [*reference_outputs, *outputs]):
        raise TerminalError("every sample must have the same number of outputs as the reference")
    labels = list(names) if names is not None else [f"output{i}" for i in range(count)]
    per_output = []
    for k in range(count):
        ref = [_as_float(s[k]) for s in reference_outputs]
        out = [_as_float(s[k]) for s in outputs]
        mismatched = [i for i, (r, o) in enumerate(zip(ref, out, strict=True)) if r.shape != o.shape]
        if mismatched:
            i = mismatched[0]
            raise TerminalError(
                f"output {labels[k]} has shape {list(out[i].shape)}, the reference {list(ref[i].shape)} (sample {i})"
            )
        cos = sum(_cosine(r, o) for r, o in zip(ref, out, strict=True)) / len(ref)
        per_output.append(OutputFidelity(labels[k], top1_agreement(ref, out), cos, sqnr_db(ref, out)))
    agreements = [o.top1_agreement for o in per_output if o.top1_agreement is not None]
    return Fidelity(
        outputs=per_output,
        top1_agreement=sum(agreements) / len(agreements) if agreements else None,
        cosine=sum(o.cosine for o in per_output) / len(per_output),
        sqnr_db=min(o.sqnr_db for o in per_output),
        samples=len(outputs),
    )


@dataclass(frozen=True)
class AccuracyResult:
    """What an SLO on accuracy is judged on: `accuracy` of the model and `reference` of the float model,
    in the same metric (task accuracy with labels; without, fidelity in `measure`, reference 1.0)."""

    metric: Metric
    accuracy: float
    reference: float
    samples: int
    fidelity: Fidelity
    measure: str = ""
    """What was measured: the task metric, or the fidelity measure (see `fidelity_measure`)."""

    @property
    def drop(self) -> float:
        return self.reference - self.accuracy

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "measure": self.measure or self.metric,
            "accuracy": self.accuracy,
            "reference": self.reference,
            "drop": self.drop,
            "samples": self.samples,
            "fidelity": self.fidelity.as_dict(),
        }


@dataclass
class ModelOutputs:
    """Outputs of one model over samples: per sample, per output (in `names` order)."""

    names: list[str]
    values: list[list[np.ndarray]] = field(default_factory=list)


def score(
    outputs: ModelOutputs,
    reference: ModelOutputs,
    labels: Sequence[int] | None = None,
    metric: Metric = "top1",
) -> AccuracyResult:
    """The accuracy decision in one place: labels and a task metric give task accuracy of both models;
    otherwise fidelity to the reference in `fidelity_measure(reference)` (the reference scores 1.0)."""
    fid = fidelity(reference.values, outputs.values, outputs.names)
    if labels is not None and metric != "fidelity":
        acc = task_accuracy([s[0] for s in outputs.values], labels, metric)
        ref = task_accuracy([s[0] for s in reference.values], labels, metric)
        return AccuracyResult(metric, acc, ref, len(outputs.values), fid, metric)
    measure = fidelity_measure(reference)
    if measure.startswith("map_iou@"):
        threshold = float(measure.split("@", 1)[1])
        iou = binary_map_iou([s[0] for s in reference.values], [s[0] for s in outputs.values], threshold)
        value = iou if iou is not None else 0.0
    elif measure == "top1_agreement" and fid.top1_agreement is not None:
        value = fid.top1_agreement
    else:
        value = fid.cosine
    return AccuracyResult("fidelity", value, 1.0, len(outputs.values), fid, measure)


def fidelity_measure(reference: ModelOutputs) -> str:
    """How fidelity is measured for these reference outputs (by their first output): `map_iou@T` for a
    dense single-channel map, binarized at T (0.5 for probabilities in [0, 1], else 0: logits);
    `top1_agreement` when the output has a class axis; otherwise `cosine`."""
    first = [s[0] for s in reference.values]
    threshold = _map_threshold(first)
    if binary_map_iou(first, first, threshold) is not None:
        return f"map_iou@{threshold:g}"
    if fidelity(reference.values, reference.values, reference.names).top1_agreement is not None:
        return "top1_agreement"
    return "cosine"


MEASURE_TEXT = {"top1_agreement": "top-1 agreement", "cosine": "cosine similarity"}


def describe_measure(measure: str) -> str:
    """Words for a report: `map_iou@0.5` -> "IoU of the maps binarized at 0.5"."""
    if measure.startswith("map_iou@"):
        return f"IoU of the maps binarized at {measure.split('@', 1)[1]}"
    return MEASURE_TEXT.get(measure, measure)


def _map_threshold(first: Sequence[Any]) -> float:
    import numpy as np

    values = [np.asarray(v) for v in first]
    if not values or any(v.size == 0 for v in values):
        return 0.5
    lo = min(float(v.min()) for v in values)
    hi = max(float(v.max()) for v in values)
    return 0.5 if lo >= 0.0 and hi <= 1.0 else 0.0


_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(uint16)": "uint16",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def session(model: Path, threads: int = 1, level: str = "all") -> Any:
    """An ONNX Runtime CPU session optimized at `level`; `.ort` artifacts always load as saved (they
    are already optimized)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    chosen = "disable_all" if model.suffix == ".ort" else level
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[chosen])
    try:
        return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types
        raise TerminalError(f"onnxruntime cannot load {model.name}: {str(exc).splitlines()[0]}") from exc


def run_model(
    model: Path, feeds: Iterable[Sample | Mapping[str, Any]], threads: int = 1, level: str = "all"
) -> ModelOutputs:
    """Runs `model` on every feed. Feeds are cast to the model's input types, so one sample set serves
    a float reference and an fp16-I/O artifact alike."""
    import numpy as np

    sess = session(model, threads, level)
    inputs = {i.name: _ORT_TYPES.get(i.type) for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    result = ModelOutputs(names)
    for item in feeds:
        feed = item if isinstance(item, Mapping) else item.feed
        missing = sorted(set(inputs) - set(feed))
        if missing:
            raise TerminalError(f"{model.name}: feed lacks inputs {', '.join(missing)}")
        cast = {k: np.asarray(feed[k]).astype(t, copy=False) if t else feed[k] for k, t in inputs.items()}
        try:
            values = sess.run(None, cast)
        except Exception as exc:  # ORT raises its own exception types
            raise TerminalError(
                f"onnxruntime failed running {model.name}: {str(exc).splitlines()[0]}"
            ) from exc
        result.values.append([np.asarray(v) for v in values])
    return result


@dataclass
class Comparison:
    result: AccuracyResult
    outputs: ModelOutputs
    reference: ModelOutputs


def compare_models(
    model: Path,
    reference_model: Path,
    samples: Sequence[Sample],
    labels: Sequence[int] | None = None,
    metric: Metric = "top1",
    threads: int = 1,
    reference: ModelOutputs | None = None,
) -> Comparison:
    """Runs the artifact and the float reference over the same samples and scores them. Pass the
    `reference` outputs of an earlier call to skip re-running the float model (the auto search
    compares many candidates with one reference)."""
    ref = reference if reference is not None else run_model(reference_model, samples, threads)
    out = run_model(model, samples, threads)
    return Comparison(score(out, ref, labels, metric), out, ref)


def binary_map_iou(reference: Sequence[Any], outputs: Sequence[Any], threshold: float = 0.5) -> float | None:
    """IoU of single-channel dense maps ([N, 1, H, W] with H, W > 1: a text or segmentation probability
    map) binarized at `threshold`, over all given samples; None for any other output shape.

    Added for the quantize stage's sensitive-layer search (issue 5): top-1 agreement over a spatial axis
    means nothing for such maps, while the binarized map is what a detector's post-processing reads."""
    import numpy as np

    inter, union = 0, 0
    for r, o in zip(reference, outputs, strict=False):
        ra, oa = np.asarray(r), np.asarray(o)
        if ra.ndim != 4 or ra.shape[1] != 1 or ra.shape[2] <= 1 or ra.shape[3] <= 1 or ra.shape != oa.shape:
            return None
        rb, ob = ra > threshold, oa > threshold
        inter += int((rb & ob).sum())
        union += int((rb | ob).sum())
    if not reference:
        return None
    return inter / union if union else 1.0
