"""Classification: top-1 / top-5 against integer labels; top-1 agreement with the float model without.

The scores are one vector per sample ([1, C], [1, C, 1, 1], [C]); ties go to the lower class index.
A single score per sample ([1, 1], a voice-activity or wake-word probability) is a yes/no decision at
the task's threshold: its argmax would always be class 0, so it is never ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.sdk.errors import TerminalError
from backends.tasks.base import TaskMetric, TaskScore, output_index
from backends.tasks.config import Classification


def score_vector(scores: Any, sample: int) -> Any:
    import numpy as np

    vector = np.squeeze(np.asarray(scores, dtype=np.float64))
    if vector.ndim == 0:  # [1, 1]: one score, a yes/no decision
        vector = vector.reshape(1)
    if vector.ndim != 1:
        raise TerminalError(
            f"classification needs one score vector per sample; sample {sample} has scores of shape "
            f"{list(np.shape(scores))} (declare the evaluate.task that reads this output)"
        )
    return vector


def ranked(scores: Any, sample: int) -> list[int]:
    """Class indices, best first (ties: lower index)."""
    import numpy as np

    return [int(i) for i in np.argsort(-score_vector(scores, sample), kind="stable")]


class ClassificationMetric(TaskMetric):
    task = "classification"

    def __init__(self, config: Classification, names: Sequence[str], labelled: bool) -> None:
        super().__init__(names, labelled)
        self.config = config
        self.index = output_index(names, config.output, self.task)
        self.k = 5 if config.metric == "top5" else 1
        self.hits = self.reference_hits = self.agree = 0
        self.classes: set[int] = set()

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        ref_scores = score_vector(reference[self.index], self.samples)
        self.classes.add(len(ref_scores))
        if len(self.classes) != 1:
            raise TerminalError(f"samples have different class counts: {sorted(self.classes)}")
        if len(ref_scores) == 1:
            ref, out = (
                self._decided(ref_scores),
                self._decided(score_vector(outputs[self.index], self.samples)),
            )
        else:
            ref, out = ranked(reference[self.index], self.samples), ranked(outputs[self.index], self.samples)
        if self.labelled and len(ref_scores) == 1 and int(label) not in (0, 1):
            raise TerminalError(f"sample {self.samples}: a yes/no decision's label is 0 or 1, got {label}")
        if self.labelled:
            self.hits += int(int(label) in out[: self.k])
            self.reference_hits += int(int(label) in ref[: self.k])
        self.agree += int(ref[0] == out[0])

    def _decided(self, score: Any) -> list[int]:
        if self.k != 1:
            raise TerminalError("evaluate.task.metric top5 needs class scores; this output has one score")
        return [int(float(score[0]) > self.config.decision_threshold())]

    @property
    def binary(self) -> bool:
        return self.classes == {1}

    def result(self) -> TaskScore:
        if not self.samples:
            raise TerminalError("classification needs at least one sample")
        n = self.samples
        implied = " (implied by integer labels: declare evaluate.task)" if self.config.implied else ""
        if self.binary:
            return self._binary_result()
        if self.labelled:
            measure = self.config.metric
            text = f"{measure} accuracy against labels{implied}"
            return TaskScore(
                self.task, measure, text, self.against, self.hits / n, self.reference_hits / n,
                {"top1_agreement": self.agree / n},
            )  # fmt: skip
        text = "top-1 agreement of the class scores with the float model"
        return TaskScore(self.task, "top1_agreement", text, self.against, self.agree / n, 1.0)

    def _binary_result(self) -> TaskScore:
        n, threshold = self.samples, self.config.decision_threshold()
        decision = f"yes/no decisions at score > {threshold:g}"
        if self.labelled:
            text = f"accuracy of the {decision} against 0/1 labels"
            extra = {"decision_agreement": self.agree / n}
            return TaskScore(
                self.task,
                "decision_accuracy",
                text,
                self.against,
                self.hits / n,
                self.reference_hits / n,
                extra,
            )
        text = f"agreement of the {decision} with the float model's"
        return TaskScore(self.task, "decision_agreement", text, self.against, self.agree / n, 1.0)
