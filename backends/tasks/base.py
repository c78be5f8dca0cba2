"""What every task metric is: fed one sample at a time (the float model's outputs, the candidate's
outputs, the sample's label if any), it decodes both the way the application would and scores the
candidate against the labels, or against the float model's decoded result without labels.

A metric never runs a model: it sees arrays only, so evaluate, the auto sensitive-layer search and the
SLOs (and anything that compares two sets of outputs) compute the same number from the same outputs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.sdk.errors import TerminalError

AGAINST_LABELS = "labels"
AGAINST_FLOAT = "the float model"


@dataclass(frozen=True)
class TaskScore:
    task: str
    """classification | detection | ctc | dense | tokens | regression, or generic (no task declared)."""
    measure: str
    """The measure's short name, e.g. `box_f1@0.5`, `exact_match`, `cosine`."""
    text: str
    """The measure in words, for every verdict: what was computed, against what."""
    against: str
    value: float
    """The candidate's score (higher is better, 1.0 is perfect)."""
    reference: float
    """The float model's score on the same labels; 1.0 against the float model itself."""
    extra: dict[str, float] = field(default_factory=dict)
    """Secondary numbers of the same task (mAP beside F1, CER beside exact match, max relative error)."""


class TaskMetric(ABC):
    task = ""
    reads: tuple[str, ...] = ()
    """Model inputs the metric reads beside the outputs, per sample (a padding mask): whoever feeds it
    passes them to `add`, read from the same samples the models ran on."""

    def __init__(self, names: Sequence[str], labelled: bool) -> None:
        self.names = list(names)
        self.labelled = labelled
        self.samples = 0
        self.feed: Mapping[str, Any] = {}
        """The current sample's inputs named in `reads`, while `add` runs."""

    def add(
        self,
        reference: Sequence[Any],
        outputs: Sequence[Any],
        label: Any = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> None:
        if self.labelled and label is None:
            raise TerminalError(f"sample {self.samples} has no label")
        missing = [name for name in self.reads if name not in (inputs or {})]
        if missing:
            raise TerminalError(f"sample {self.samples}: the {self.task} task reads input {missing[0]!r}")
        self.feed = inputs or {}
        self._add(reference, outputs, label)
        self.samples += 1

    def scored_part(self, value: Any) -> Any:
        """The part of an output array of the current sample that the task reads: the whole array,
        except where a task leaves positions out (padding); fidelity (cosine, SQNR) is measured on it."""
        return value

    @abstractmethod
    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None: ...

    @abstractmethod
    def result(self) -> TaskScore: ...

    @property
    def against(self) -> str:
        return AGAINST_LABELS if self.labelled else AGAINST_FLOAT


def output_index(names: Sequence[str], wanted: str | None, task: str) -> int:
    """Index of the output a task reads: the named one, else the first."""
    if wanted is None:
        return 0
    if wanted not in names:
        raise TerminalError(
            f"evaluate.task.output: the model has no output {wanted!r} (outputs: {', '.join(names)}) for {task}"
        )
    return list(names).index(wanted)
