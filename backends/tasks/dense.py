"""Dense maps (segmentation, text maps, [N, 1, H, W]): IoU of the maps binarized at a threshold (0.5 for
probabilities in [0, 1], else 0), summed over samples, against the float model's maps. Without a declared
task it is the generic measure for a single-channel map, named as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.passes.metrics import MapIou
from backends.sdk.errors import TerminalError
from backends.tasks.base import TaskMetric, TaskScore, output_index
from backends.tasks.config import Dense
from backends.tasks.tensor import GENERIC


class DenseMetric(TaskMetric):
    task = "dense"

    def __init__(self, config: Dense, names: Sequence[str], labelled: bool) -> None:
        if labelled:
            raise TerminalError(
                "evaluate.labels: a dense task is measured against the float model's maps; remove the labels"
            )
        super().__init__(names, labelled)
        self.config = config
        self.index = output_index(names, config.output, self.task)
        self.map = MapIou()

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        self.map.add(reference[self.index], outputs[self.index])
        if not self.map.is_map:
            import numpy as np

            raise TerminalError(
                f"a dense task needs a single-channel map [N, 1, H, W]; output {self.names[self.index]} "
                f"has shape {list(np.shape(reference[self.index]))}"
            )

    def result(self) -> TaskScore:
        threshold = self.config.threshold
        if threshold is not None and threshold not in (0.5, 0.0):
            raise TerminalError("evaluate.task.threshold of a dense task must be 0.5 or 0")
        value = self.map.value(threshold)
        if value is None:
            raise TerminalError("dense needs at least one sample")
        used = self.map.threshold() if threshold is None else threshold
        text = f"IoU of the maps binarized at {used:g} with the float model" + (
            GENERIC if self.config.generic else ""
        )
        task = "generic" if self.config.generic else self.task
        return TaskScore(task, f"map_iou@{used:g}", text, self.against, value, 1.0)
