"""Dense maps (segmentation, text maps, [N, 1, H, W]): IoU of the maps binarized at a threshold (the
declared one; else 0.5 for probabilities in [0, 1], 0 for logits), summed over samples (the pooled IoU,
the verdict's figure), against the float model's maps; the mean and the lowest per-image IoU beside it
(a pooled IoU hides an image whose small map was lost). Without a declared task it is the generic
measure for a single-channel map, named as such.
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
        self.map = MapIou(config.threshold)

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
        value = self.map.value(threshold)
        if value is None:
            raise TerminalError("dense needs at least one sample")
        used = self.map.threshold() if threshold is None else threshold
        text = f"IoU of the maps binarized at {used:g} with the float model" + (
            GENERIC if self.config.generic else ""
        )
        task = "generic" if self.config.generic else self.task
        images = self.map.image_values(threshold)
        extra = {"per_image_iou_mean": sum(images) / len(images), "per_image_iou_min": min(images)}
        return TaskScore(task, f"map_iou@{used:g}", text, self.against, value, 1.0, extra)
