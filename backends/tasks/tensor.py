"""Outputs compared as numbers (regression, embeddings, recurrent state): mean cosine similarity over
samples and outputs, and the max relative error max |out - ref| / max |ref| per output and sample (the
worst one reported), named as such. Without a declared task it is the generic measure for anything that
is not a single-channel map, and every verdict says it is the generic one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.passes.metrics import as_float, cosine
from backends.sdk.errors import TerminalError
from backends.tasks.base import TaskMetric, TaskScore, output_index
from backends.tasks.config import Tensor

GENERIC = " (generic measure: no evaluate.task declared)"


def max_relative_error(reference: Any, output: Any) -> float:
    import numpy as np

    r, o = as_float(reference), as_float(output)
    if not (np.isfinite(r).all() and np.isfinite(o).all()):
        return float("inf")
    scale = float(np.abs(r).max()) if r.size else 0.0
    diff = float(np.abs(o - r).max()) if r.size else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


class TensorMetric(TaskMetric):
    task = "regression"

    def __init__(self, config: Tensor, names: Sequence[str], labelled: bool) -> None:
        if labelled:
            raise TerminalError(
                "evaluate.labels: a regression task is measured against the float model; remove the labels"
            )
        super().__init__(names, labelled)
        self.config = config
        self.indices = [output_index(names, o, self.task) for o in config.outputs] or list(range(len(names)))
        self.cosine = 0.0
        self.worst = 0.0

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        for i in self.indices:
            self.cosine += cosine(as_float(reference[i]), as_float(outputs[i])) / len(self.indices)
            self.worst = max(self.worst, max_relative_error(reference[i], outputs[i]))

    def result(self) -> TaskScore:
        if not self.samples:
            raise TerminalError("regression needs at least one sample")
        which = "all outputs" if not self.config.outputs else ", ".join(self.config.outputs)
        text = (
            f"cosine similarity to the float model (mean over samples and {which}); "
            f"max relative error {self.worst:.4g}" + (GENERIC if self.config.generic else "")
        )
        task = "generic" if self.config.generic else self.task
        extra = {"max_relative_error": self.worst}
        return TaskScore(task, "cosine", text, self.against, self.cosine / self.samples, 1.0, extra)
