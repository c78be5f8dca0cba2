"""The data and the metric the auto sensitive-layer search measures its budget on.

One data set for one number: with `evaluate.data` the search scores every candidate on the evaluation
set, against `evaluate.labels` when given, with the declared `evaluate.task`: exactly what the
accuracy SLO is judged on, so "budget met" means the quantized ONNX meets `max_drop` of the same size
on that data (the compiled artifact meets it too when the compile keeps the numerics, which the
compile stage checks). Without `evaluate.data` it falls back to the calibration samples against the
float model, and the report says that the SLO is judged on other data. An evaluation set too large to
hold (MAX_ELEMENTS) is cut to its first samples, and the report states that split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from backends.passes import data
from backends.tasks import TaskConfig

MAX_ELEMENTS = 1 << 27
"""Input elements the search holds in memory (with the float model's outputs on them): every digit
image, ~250 YOLOX 416x416 frames. A larger evaluation set is cut to its first samples, and the report
says the budget was measured on that stated split."""


@dataclass(frozen=True)
class SearchSet:
    samples: list[data.Sample]
    labels: list[Any] | None
    task: TaskConfig | None
    source: str
    """Where the samples come from, in words (stage note and report)."""
    slo_data: bool
    """True when these are the samples (and labels) the accuracy SLO is judged on."""
    of: int | None = None
    """The evaluation set's size when the search measures on its first samples only."""

    def describe(self) -> str:
        against = "labels" if self.labels is not None else "the float model"
        if self.of is not None:
            return (
                f"the first {len(self.samples)} of {self.of} samples of {self.source} against {against}: a split "
                "of the SLO's data (the budget holds on it; the SLO judges all of them)"
            )
        same = (
            "the data the accuracy SLO is judged on"
            if self.slo_data
            else "not the SLO's data (set evaluate.data to measure the budget on it)"
        )
        return f"{len(self.samples)} samples of {self.source} against {against}: {same}"


def evaluate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `evaluate` section as the quantize stage reads it (flat field paths: the task always, the
    metric only for the auto search)."""
    return {
        "task": config.get("evaluate.task"),
        "metric": config.get("evaluate.metric") or "top1",
    }


def search_set(
    config: Mapping[str, Any],
    inputs: Mapping[str, Any],
    reference: Path,
    calibration: Sequence[Path],
    calibration_count: int,
) -> SearchSet:
    from backends.tasks.setup import declared, sample_labels

    evaluate = evaluate_config(config)
    folder = inputs.get("eval_data")
    specs = data.model_inputs(reference)
    if folder is None:
        task = declared(evaluate, {k: v for k, v in inputs.items() if k == "charset"}, reference)
        samples = [data.read_sample(p, specs) for p in calibration[:calibration_count]]
        return SearchSet(samples, None, task, "quantization.calibration.data", False)
    chosen = data.sample_set(Path(folder), specs, role="evaluate.data")
    task = declared(evaluate, inputs, reference)
    labels = sample_labels(evaluate, inputs, task, chosen.names)
    per = max(1, sum(_elements(spec.shape) for spec in specs))
    keep = max(1, MAX_ELEMENTS // per)
    source = f"evaluate.data ({Path(folder).name})"
    if keep >= len(chosen):
        return SearchSet(list(chosen), labels, task, source, True)
    first = list(islice(iter(chosen), keep))
    return SearchSet(first, None if labels is None else labels[:keep], task, source, False, len(chosen))


def _elements(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
