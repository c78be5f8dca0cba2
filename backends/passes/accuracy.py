"""Running models and scoring them: evaluate, the quantize stage's sensitive-layer search and the SLOs
all score a model through `Tally`, which hands each sample to the declared task's metric
(backends.tasks: decoder + metric, one module per task) and reports cosine and SQNR per output beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends import tasks
from backends.passes.metrics import SQNR_CAP_DB as SQNR_CAP_DB  # re-exported: reports cite it
from backends.passes.metrics import Sqnr, as_float, cosine
from backends.runners.benchprog import ORT_DTYPES, ORT_LEVELS
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import numpy as np

    from backends.passes.data import Sample

SampleOutputs = Sequence[Sequence[Any]]
"""Per sample, per output: the arrays `session.run(None, feed)` returns."""


@dataclass(frozen=True)
class OutputFidelity:
    name: str
    cosine: float
    """Mean over samples of the cosine similarity of the flattened outputs."""
    sqnr_db: float
    """10*log10(sum ref^2 / sum (ref - out)^2) over all samples, clamped to +-SQNR_CAP_DB."""


@dataclass(frozen=True)
class Fidelity:
    """Per-output closeness to the float model, beside the task measure: mean cosine and the worst
    (minimum) SQNR. No argmax over an axis guessed from the shape: what an output means is the task's."""

    outputs: list[OutputFidelity]
    cosine: float
    sqnr_db: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "cosine": self.cosine,
            "sqnr_db": self.sqnr_db,
            "outputs": [{"name": o.name, "cosine": o.cosine, "sqnr_db": o.sqnr_db} for o in self.outputs],
        }


def sqnr_db(reference: Sequence[Any], outputs: Sequence[Any]) -> float:
    """Signal-to-quantization-noise ratio in dB over all given arrays, clamped to +-SQNR_CAP_DB."""
    total = Sqnr()
    for r, o in zip(reference, outputs, strict=True):
        total.add(r, o)
    return total.value()


@dataclass(frozen=True)
class AccuracyResult:
    """What an SLO on accuracy is judged on: `accuracy` of the model and `reference` of the float model,
    in the same task measure (against labels, or against the float model's decoded outputs, where the
    float model scores 1.0)."""

    metric: str
    """The measure's short name (`top1`, `box_f1@0.5`, `exact_match`, `cosine`, ...)."""
    accuracy: float
    reference: float
    samples: int
    fidelity: Fidelity
    task: str = "generic"
    text: str = ""
    """The measure in words, with what it was measured against: every verdict carries it."""
    against: str = tasks.AGAINST_FLOAT
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def measure(self) -> str:
        return self.metric

    @property
    def labelled(self) -> bool:
        return self.against == tasks.AGAINST_LABELS

    @property
    def drop(self) -> float:
        return self.reference - self.accuracy

    def note(self) -> str:
        """For a stage note: `detection box_f1@0.5 0.9231 vs the float model`."""
        against = "vs labels" if self.labelled else "vs the float model"
        return f"{self.task} {self.metric} {self.accuracy:.4f} {against}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "metric": self.metric,
            "measure": self.metric,
            "text": self.text,
            "against": self.against,
            "accuracy": self.accuracy,
            "reference": self.reference,
            "drop": self.drop,
            "samples": self.samples,
            "extra": dict(sorted(self.extra.items())),
            "fidelity": self.fidelity.as_dict(),
        }


@dataclass
class ModelOutputs:
    """Outputs of one model over samples: per sample, per output (in `names` order)."""

    names: list[str]
    values: list[list[np.ndarray]] = field(default_factory=list)


@dataclass
class _OutputTally:
    sqnr: Sqnr = field(default_factory=Sqnr)
    cosine: float = 0.0


class Tally:
    """The accuracy decision, fed one sample at a time: `add` each sample's outputs of the float
    reference and of the model, then `result()`. The task's metric (backends.tasks) decodes and scores
    them, against `labels` when given, else against the float model; cosine and SQNR per output are
    always reported beside it."""

    def __init__(
        self,
        names: Sequence[str],
        task: tasks.TaskConfig | None = None,
        labels: Sequence[Any] | None = None,
        samples: Iterable[Sample | Mapping[str, Any]] | None = None,
    ):
        self.names = list(names)
        self.labels = labels
        self.samples = 0
        self._outputs = [_OutputTally() for _ in self.names]
        self._metric = tasks.metric_for(task, self.names, labels is not None)
        self._inputs = task_inputs(self._metric.reads, samples)

    def add(self, reference: Sequence[Any], outputs: Sequence[Any]) -> None:
        index = self.samples
        if len(reference) != len(self.names) or len(outputs) != len(self.names):
            raise TerminalError("every sample must have the same number of outputs as the reference")
        pairs = [(as_float(r), as_float(o)) for r, o in zip(reference, outputs, strict=True)]
        for name, (ra, oa) in zip(self.names, pairs, strict=True):
            if ra.shape != oa.shape:
                raise TerminalError(
                    f"output {name} has shape {list(oa.shape)}, the reference {list(ra.shape)} (sample {index})"
                )
        label = None
        if self.labels is not None:
            if index >= len(self.labels):
                raise TerminalError(f"more than {len(self.labels)} outputs for {len(self.labels)} labels")
            label = self.labels[index]
        inputs = None
        if self._inputs is not None:
            if index >= len(self._inputs):
                raise TerminalError(f"more than {len(self._inputs)} outputs for {len(self._inputs)} samples")
            inputs = self._inputs[index]
        self._metric.add(reference, outputs, label, inputs)
        for tally, (ra, oa) in zip(self._outputs, pairs, strict=True):
            ra, oa = self._metric.scored_part(ra), self._metric.scored_part(oa)
            tally.sqnr.add(ra, oa)
            tally.cosine += cosine(ra, oa)
        self.samples += 1

    def fidelity(self) -> Fidelity:
        if not self.samples:
            raise TerminalError("fidelity needs at least one sample")
        per_output = [
            OutputFidelity(name, t.cosine / self.samples, t.sqnr.value())
            for name, t in zip(self.names, self._outputs, strict=True)
        ]
        return Fidelity(
            outputs=per_output,
            cosine=sum(o.cosine for o in per_output) / len(per_output),
            sqnr_db=min(o.sqnr_db for o in per_output),
            samples=self.samples,
        )

    def result(self) -> AccuracyResult:
        fid = self.fidelity()
        if self.labels is not None and len(self.labels) != self.samples:
            raise TerminalError(f"{self.samples} outputs but {len(self.labels)} labels")
        got = self._metric.result()
        return AccuracyResult(
            got.measure,
            got.value,
            got.reference,
            self.samples,
            fid,
            got.task,
            got.text,
            got.against,
            got.extra,
        )


def task_inputs(
    reads: Sequence[str], samples: Iterable[Sample | Mapping[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """Per sample, the inputs a task metric reads beside the outputs (`TaskMetric.reads`: a padding
    mask), taken from the samples the models ran on; None when it reads none."""
    if not reads:
        return None
    if samples is None:
        raise TerminalError(f"the task reads input {reads[0]!r} of each sample, and no samples were given")
    found = []
    for item in samples:
        feed = item if isinstance(item, Mapping) else item.feed
        missing = [name for name in reads if name not in feed]
        if missing:
            raise TerminalError(
                f"evaluate.task reads input {missing[0]!r}; the samples hold {', '.join(sorted(feed))}"
            )
        found.append({name: feed[name] for name in reads})
    return found


def _pairs(reference: SampleOutputs, outputs: SampleOutputs) -> Iterable[tuple[Sequence[Any], Sequence[Any]]]:
    if len(reference) != len(outputs):
        raise TerminalError(f"{len(outputs)} samples compared with {len(reference)} reference samples")
    return zip(reference, outputs, strict=True)


def fidelity(
    reference_outputs: SampleOutputs, outputs: SampleOutputs, names: Sequence[str] | None = None
) -> Fidelity:
    """How closely `outputs` follow `reference_outputs` (same samples, same output order)."""
    count = len(reference_outputs[0]) if reference_outputs else 0
    tally = Tally(list(names) if names is not None else [f"output{i}" for i in range(count)])
    for r, o in _pairs(reference_outputs, outputs):
        tally.add(r, o)
    return tally.fidelity()


def score(
    outputs: ModelOutputs,
    reference: ModelOutputs,
    labels: Sequence[Any] | None = None,
    task: tasks.TaskConfig | None = None,
    samples: Iterable[Sample | Mapping[str, Any]] | None = None,
) -> AccuracyResult:
    """The accuracy decision in one place (see Tally), for outputs already in memory: callable on any
    two sets of outputs of the same samples (float reference, candidate); `samples` are the feeds they
    ran on, for a task that reads an input beside the outputs (a padding mask)."""
    tally = Tally(outputs.names, task, labels, samples)
    for r, o in _pairs(reference.values, outputs.values):
        tally.add(r, o)
    return tally.result()


HOST_KERNELS: ContextVar[bool] = ContextVar("host_kernels", default=False)
"""Inside `host_kernels()`: Q/DQ models run by this host's fused integer kernels, as the host CPU
target's artifact runs; elsewhere by their own math."""


@contextmanager
def host_kernels(on: bool = True) -> Iterator[None]:
    """Scores Q/DQ models inside the block as the host CPU runs them (a quantize pass for that target:
    its search and check measure what its compiled artifact will compute, rounding and all)."""
    token = HOST_KERNELS.set(on)
    try:
        yield
    finally:
        HOST_KERNELS.reset(token)


def session(model: Path, threads: int = 1, level: str = "all") -> Any:
    """An ONNX Runtime CPU session optimized at `level`, Q/DQ computed as written (no integer-kernel
    fusion) unless inside `host_kernels`; `.ort` artifacts always load as saved (they are already
    optimized)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # no busy-waiting between ops: on a shared 2-core machine spinning threads take the cores the
    # other runs need (these sessions produce numbers; latency is measured by the runners, not here)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    chosen = "disable_all" if model.suffix == ".ort" else level
    if model.suffix != ".ort" and not HOST_KERNELS.get():
        # a QDQ .onnx is scored by its own math (DequantizeLinear -> float op -> QuantizeLinear), not
        # by this host's fused int8 kernels: on x86 without VNNI those clip u8 x s8 sums
        # (backends.sdk.host.int8_dot) and a detector's box F1 read 0.795 where its math gives 0.925, so
        # an NPU's score would depend on the build machine. An .ort (the cpu target's compiled
        # artifact) runs the host's kernels as its device does.
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[chosen])
    try:
        return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types
        raise TerminalError(f"onnxruntime cannot load {model.name}: {one_line(exc)}") from exc


def iter_outputs(
    model: Path, feeds: Iterable[Sample | Mapping[str, Any]], threads: int = 1, level: str = "all"
) -> tuple[list[str], Iterator[list[np.ndarray]]]:
    """(output names, each feed's outputs as they are computed). Feeds are cast to the model's input
    types, so one sample set serves a float reference and an fp16-I/O artifact alike."""
    sess = session(model, threads, level)
    inputs = {i.name: ORT_DTYPES.get(i.type) for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]

    def outputs() -> Iterator[list[np.ndarray]]:
        import numpy as np

        for item in feeds:
            feed = item if isinstance(item, Mapping) else item.feed
            missing = sorted(set(inputs) - set(feed))
            if missing:
                raise TerminalError(f"{model.name}: feed lacks inputs {', '.join(missing)}")
            cast = {k: np.asarray(feed[k]).astype(t, copy=False) if t else feed[k] for k, t in inputs.items()}
            try:
                values = sess.run(None, cast)
            except Exception as exc:  # ORT raises its own exception types
                raise TerminalError(f"onnxruntime failed running {model.name}: {one_line(exc)}") from exc
            yield [np.asarray(v) for v in values]

    return names, outputs()


def run_model(
    model: Path, feeds: Iterable[Sample | Mapping[str, Any]], threads: int = 1, level: str = "all"
) -> ModelOutputs:
    """Every feed's outputs of `model`, in memory (see iter_outputs)."""
    names, outputs = iter_outputs(model, feeds, threads, level)
    return ModelOutputs(names, list(outputs))


@dataclass
class Comparison:
    result: AccuracyResult
    outputs: ModelOutputs
    reference: ModelOutputs


def compare_models(
    model: Path,
    reference_model: Path,
    samples: Sequence[Sample],
    labels: Sequence[Any] | None = None,
    task: tasks.TaskConfig | None = None,
    threads: int = 1,
    reference: ModelOutputs | None = None,
) -> Comparison:
    """Runs the artifact and the float reference over the same samples and scores them. Pass the
    `reference` outputs of an earlier call to skip re-running the float model (the auto search
    compares many candidates with one reference)."""
    ref = reference if reference is not None else run_model(reference_model, samples, threads)
    out = run_model(model, samples, threads)
    return Comparison(score(out, ref, labels, task, samples), out, ref)
