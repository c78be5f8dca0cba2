"""Which layers must stay at higher precision: measured, ranked, then chosen greedily under a budget.

A layer is a compute node (Conv, MatMul, Gemm, ...) with the elementwise epilogue an NPU compiler fuses
into it (bias/scale, activation, hardswish chains), because that is the unit a compiler keeps in float.

Sensitivity is measured, not guessed: for each layer, the fully quantized model is copied with every
other node reading float inputs (Q/DQ pairs bypassed, float weights restored), so only that layer is
quantized, and run on a few calibration samples; the output noise it adds on its own ranks it. Local
proxies (per-tensor SQNR) were tried on PP-OCRv4 det and ranked the layers that matter badly: error that
accumulates in the neck does not reach the text map, error in the stem does.
The greedy search then builds real models (through the same quantizer as the final artifact) with the
most sensitive layers kept, one more per step, and stops when the accuracy budget holds or
`max_layers` is reached. Every number it used is in the report.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends import tasks
from backends.passes import accuracy
from backends.passes.quant.float_keep import without_layer
from backends.passes.quant.policy import COMPUTE_OPS
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes.data import Sample

THREADS = max(1, min(2, os.cpu_count() or 1))
"""ONNX Runtime threads a scoring run takes (a search candidate, the quantize check): the stage is one
process, and its sessions do not spin, so two threads halve its wait without taking a loaded core."""

EPILOGUE_OPS: frozenset[str] = frozenset(
    {
        "Relu",
        "Clip",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Elu",
        "Selu",
        "Softplus",
        "Gelu",
        "Erf",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "BatchNormalization",
    }
)
"""Elementwise ops a compiler fuses into the preceding compute op when all their other inputs are
constants or come from the same layer (x * clip(x + 3, 0, 6) / 6 is one hardswish)."""

RANK_ELEMENTS = 1 << 21
"""Input elements each one-layer model runs on while ranking (at least MIN_RANK_SAMPLES samples): the
ranking orders candidates by output SQNR, and every step the greedy search takes is measured on the
full search set; 6 frames of a 320x320 detector, 4 PP-OCR det frames."""
MIN_RANK_SAMPLES = 4

SEARCH_ELEMENTS = 1 << 24
"""Input elements each greedy step is measured on (at least MIN_SEARCH_SAMPLES samples): all 300 digits
(64 elements each), 16 PP-OCR det frames (1.2 M each). A count from sizes, not timings, so the same
inputs give the same choice on every machine."""
MIN_SEARCH_SAMPLES = 16


DROP_DIGITS = 9
"""Decimals a drop is kept to: far below any score's resolution (one sample of a million), far above
float rounding, so 1.0 - 0.995 is the 0.005 it reads as and meets a budget of 0.005."""


def drop_of(reference: float, accuracy: float) -> float:
    """The accuracy drop the budget and the `accuracy.max_drop` SLO compare."""
    return round(reference - accuracy, DROP_DIGITS)


def sample_counts(input_elements: int, available: int) -> tuple[int, int]:
    """(ranking samples, search samples) for a model whose inputs hold `input_elements` per sample."""
    per = max(1, input_elements)
    rank_n = min(available, max(MIN_RANK_SAMPLES, RANK_ELEMENTS // per))
    search_n = min(available, max(MIN_SEARCH_SAMPLES, SEARCH_ELEMENTS // per))
    return rank_n, search_n


@dataclass(frozen=True)
class Layer:
    name: str
    """The compute node's name."""
    op_type: str
    nodes: tuple[str, ...]
    """The compute node and its fused epilogue, in graph order."""


def layers(model: onnx.ModelProto) -> list[Layer]:
    """Every compute node of the graph with its fusable epilogue, in graph order."""
    nodes = list(model.graph.node)
    constants = {t.name for t in model.graph.initializer}
    constants |= {o for n in nodes if n.op_type == "Constant" for o in n.output}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            consumers.setdefault(name, []).append(i)
    out: list[Layer] = []
    for i, node in enumerate(nodes):
        if node.op_type not in COMPUTE_OPS:
            continue
        members = [i]
        produced = set(node.output)
        frontier = list(node.output)
        while frontier:
            tensor = frontier.pop(0)
            for j in consumers.get(tensor, []):
                cand = nodes[j]
                if j in members or cand.op_type not in EPILOGUE_OPS:
                    continue
                if all(not t or t in constants or t in produced for t in cand.input):
                    members.append(j)
                    produced.update(cand.output)
                    frontier.extend(cand.output)
        members.sort()
        out.append(Layer(node.name, node.op_type, tuple(nodes[j].name for j in members)))
    return out


@dataclass(frozen=True)
class Score:
    accuracy: float
    sqnr_db: float


class Scorer:
    """Scores models against the float reference on fixed samples through the one accuracy
    implementation (backends.passes.accuracy.score with the declared task, against labels when given):
    the same measure evaluate and the SLOs use. `reference_accuracy` is the float model's own score
    (1.0 against itself), so a drop here is the drop an `accuracy.max_drop` SLO judges."""

    def __init__(
        self,
        reference_model: Path,
        samples: Sequence[Sample],
        threads: int = 1,
        task: tasks.TaskConfig | None = None,
        labels: Sequence[Any] | None = None,
        reference: accuracy.ModelOutputs | None = None,
    ) -> None:
        self.reference_model = reference_model
        self.samples = list(samples)
        self.threads = threads
        self.task = task
        self.labels = list(labels) if labels is not None else None
        self.reference = (
            reference if reference is not None else accuracy.run_model(reference_model, self.samples, threads)
        )
        itself = accuracy.score(self.reference, self.reference, self.labels, task, self.samples)
        self.metric = f"{itself.task} {itself.metric}"
        self.reference_accuracy = itself.reference
        self.text = itself.text

    def subset(self, n: int) -> Scorer:
        """The same measure on the first `n` samples, reusing the float outputs already computed."""
        if n >= len(self.samples):
            return self
        reference = accuracy.ModelOutputs(self.reference.names, self.reference.values[:n])
        labels = self.labels[:n] if self.labels is not None else None
        return Scorer(self.reference_model, self.samples[:n], self.threads, self.task, labels, reference)

    def __call__(self, model: Path) -> Score:
        outputs = accuracy.run_model(model, self.samples, self.threads)
        return self.score(outputs)

    def score(self, outputs: accuracy.ModelOutputs) -> Score:
        result = accuracy.score(outputs, self.reference, self.labels, self.task, self.samples)
        return Score(result.accuracy, result.fidelity.sqnr_db)


@dataclass
class Ranked:
    layer: Layer
    accuracy: float
    """Accuracy of the float model with only this layer quantized."""
    sqnr_db: float
    """Output SQNR of the float model with only this layer quantized: the noise this layer adds."""


def rank(
    qdq_model: Path,
    float_model: onnx.ModelProto,
    candidates: Sequence[Layer],
    scorer: Scorer,
    scratch: Path,
    log: Callable[[str], None] = print,
) -> list[Ranked]:
    """Quantizes one layer at a time (every other node reads float inputs) and ranks the layers by the
    output noise each adds on its own, largest first.

    Removing one layer from a fully quantized model was tried first: the noise of all the others hides
    the change, and on PP-OCRv4 det it ranked neck layers above the stem layers that matter. Noise from
    independent layers adds up at the output, so each layer's isolated noise is what keeping it removes.
    """
    import onnx

    qdq = onnx.load(str(qdq_model))
    weights = {t.name: t for t in float_model.graph.initializer}
    everything = {n.name for n in qdq.graph.node}
    rows: list[Ranked] = []
    with tempfile.TemporaryDirectory(dir=scratch, prefix="rank-") as tmp:
        path = Path(tmp) / "candidate.onnx"
        for layer in candidates:
            own = set(layer.nodes) & everything
            if not own:
                continue
            path.write_bytes(without_layer(qdq, everything - own, weights))
            got = scorer(path)
            rows.append(Ranked(layer, got.accuracy, got.sqnr_db))
            log(
                f"  sensitivity {layer.name}: only this layer quantized -> {scorer.metric} {got.accuracy:.4f}, "
                f"sqnr {got.sqnr_db:.2f} dB"
            )
    order = sorted(range(len(rows)), key=lambda i: (rows[i].sqnr_db, rows[i].accuracy, i))
    return [rows[i] for i in order]


@dataclass
class Step:
    kept: list[str]
    added: str | None
    accuracy: float
    drop: float
    sqnr_db: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "kept": list(self.kept),
            "accuracy": round(self.accuracy, 6),
            "drop": round(self.drop, 6),
            "sqnr_db": round(self.sqnr_db, 3),
        }


@dataclass
class Search:
    chosen: list[Layer] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    budget_met: bool = False


TIE_SQNR_DB = 1.0
"""The SQNR gain (dB: 1 is a fifth less noise power) that keeps a layer whose step ties the task
metric."""


def greedy(
    ranked: Sequence[Ranked],
    build: Callable[[Sequence[Layer]], Path],
    scorer: Scorer,
    base: Score,
    max_drop: float,
    max_layers: int,
    reference_accuracy: float = 1.0,
    log: Callable[[str], None] = print,
) -> Search:
    """Keeps the most sensitive layers, one more per step, measuring every step on a real build (the
    same quantizer as the final artifact) on the full search set (a 16-sample screen of a 320x320
    detector read 0.077 where all 50 read 0.024: too biased at the budget's edge to skip a step on);
    stops as soon as the drop is within `max_drop`, or when `max_layers` are kept. A layer whose step
    scores no better than the one before is not kept (an OCR recognizer's search once went from 0.92
    to 0.82 over 7 kept convs, each a loss), and the next is tried, at most 2 x max_layers in all. A
    tie in the task metric is broken by the output's SQNR (TIE_SQNR_DB): exact match over a few
    strings moves in whole strings, so no one layer of a recognizer lifts it alone (PP-OCRv4 rec kept
    1 layer of 16 tried), while the noise each removes is measured; a tie with no less noise spends
    latency on nothing."""
    search = Search()
    drop = drop_of(reference_accuracy, base.accuracy)
    search.steps.append(Step([], None, base.accuracy, drop, base.sqnr_db))
    if drop <= max_drop:
        search.budget_met = True
        return search
    current, noise = base.accuracy, base.sqnr_db
    for row in ranked[: 2 * max_layers]:
        if len(search.chosen) >= max_layers:
            break
        trial = [*search.chosen, row.layer]
        got = scorer(build(trial))
        drop = drop_of(reference_accuracy, got.accuracy)
        tied = abs(got.accuracy - current) <= 1e-9
        if got.accuracy <= current + 1e-9 and not (tied and got.sqnr_db >= noise + TIE_SQNR_DB):
            log(
                f"  try +{row.layer.name} -> {scorer.metric} {got.accuracy:.4f}, sqnr {got.sqnr_db:.2f} dB: no "
                f"better than {current:.4f} ({noise:.2f} dB), not kept"
            )
            continue
        search.chosen, current, noise = trial, got.accuracy, got.sqnr_db
        names = [layer.name for layer in search.chosen]
        search.steps.append(Step(names, row.layer.name, got.accuracy, drop, got.sqnr_db))
        log(
            f"  step {len(names)}: +{row.layer.name} -> {scorer.metric} {got.accuracy:.4f} (drop {drop:.4f}), "
            f"sqnr {got.sqnr_db:.2f} dB"
        )
        if drop <= max_drop:
            search.budget_met = True
            break
    return search


def ranked_table(ranked: Sequence[Ranked]) -> list[dict[str, Any]]:
    return [
        {
            "rank": i + 1,
            "layer": r.layer.name,
            "op_type": r.layer.op_type,
            "nodes": len(r.layer.nodes),
            "alone_accuracy": round(r.accuracy, 6),
            "alone_sqnr_db": round(r.sqnr_db, 3),
        }
        for i, r in enumerate(ranked)
    ]


def format_table(rows: Sequence[Mapping[str, Any]], metric: str, limit: int = 20) -> str:
    """The ranked table as text (most sensitive first), for the log and for tests to print."""
    if rows and "sqnr_db" in rows[0]:
        from backends.passes.quant.point_search import format_table as points_table

        return points_table(rows, metric, limit)
    lines = [
        f"{'rank':>4}  {'layer':<36} {'op':<14} {'nodes':>5} {metric + ' alone':>22} {'sqnr alone dB':>13}"
    ]
    for row in rows[:limit]:
        lines.append(
            f"{row['rank']:>4}  {row['layer'][:36]:<36} {row['op_type']:<14} {row['nodes']:>5} "
            f"{row['alone_accuracy']:>22.4f} {row['alone_sqnr_db']:>13.2f}"
        )
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more")
    return "\n".join(lines)


def check_samples(samples: Sequence[Sample]) -> None:
    if not samples:
        raise TerminalError("quantization.sensitive_layers.auto needs calibration samples to measure on")


def first_outputs(outputs: accuracy.ModelOutputs) -> list[np.ndarray]:
    return [s[0] for s in outputs.values]
