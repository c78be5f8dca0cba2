"""Task metrics: one module per task (decoder + metric), the single place accuracy is computed.

Evaluate, the auto sensitive-layer search and the SLOs all score through `metric_for`, fed the float
model's outputs and the candidate's outputs (arrays only, no sessions), so the same data gives the same
number everywhere. A spec declares its task in `evaluate.task`; without one, integer labels imply
classification and otherwise the generic measure applies (map IoU for a single-channel map, cosine for
anything else), and every verdict names it as generic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.tasks.base import AGAINST_FLOAT, AGAINST_LABELS, TaskMetric, TaskScore
from backends.tasks.config import (
    TASK_TYPES,
    Classification,
    Ctc,
    Dense,
    Detection,
    TaskConfig,
    Tensor,
    Tokens,
    from_evaluate,
    resolve,
)

__all__ = [
    "AGAINST_FLOAT",
    "AGAINST_LABELS",
    "TASK_TYPES",
    "Classification",
    "Ctc",
    "Dense",
    "Detection",
    "TaskConfig",
    "TaskMetric",
    "TaskScore",
    "Tensor",
    "Tokens",
    "from_evaluate",
    "metric_for",
    "resolve",
]


def metric_for(task: TaskConfig | None, names: Sequence[str], labelled: bool) -> TaskMetric:
    """The metric of a declared task, or of the generic measure when `task` is None."""
    from backends.tasks.classification import ClassificationMetric
    from backends.tasks.ctc import CtcMetric
    from backends.tasks.dense import DenseMetric
    from backends.tasks.detection import DetectionMetric
    from backends.tasks.tensor import TensorMetric
    from backends.tasks.tokens import TokensMetric

    if task is None:
        if labelled:
            return ClassificationMetric(Classification(implied=True), names, labelled)
        return GenericMetric(names)
    if isinstance(task, Classification):
        return ClassificationMetric(task, names, labelled)
    if isinstance(task, Detection):
        return DetectionMetric(task, names, labelled)
    if isinstance(task, Ctc):
        return CtcMetric(task, names, labelled)
    if isinstance(task, Dense):
        return DenseMetric(task, names, labelled)
    if isinstance(task, Tokens):
        return TokensMetric(task, names, labelled)
    return TensorMetric(task, names, labelled)


class GenericMetric(TaskMetric):
    """No task declared, no labels: the map IoU when the first output is a single-channel map
    [N, 1, H, W], cosine over all outputs otherwise; decided by the first sample's reference."""

    task = "generic"

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(names, False)
        self.inner: TaskMetric | None = None

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        import numpy as np

        from backends.tasks.dense import DenseMetric
        from backends.tasks.tensor import TensorMetric

        if self.inner is None:
            r = np.asarray(reference[0])
            is_map = r.ndim == 4 and r.shape[1] == 1 and r.shape[2] > 1 and r.shape[3] > 1
            self.inner = (
                DenseMetric(Dense(generic=True), self.names, False)
                if is_map
                else TensorMetric(Tensor(generic=True), self.names, False)
            )
        self.inner.add(reference, outputs, None)

    def result(self) -> TaskScore:
        if self.inner is None:
            from backends.sdk.errors import TerminalError

            raise TerminalError("the generic measure needs at least one sample")
        return self.inner.result()
