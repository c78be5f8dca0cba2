"""Sequence recognition with CTC: greedy decode, then string exact match and character error rate.

The output holds per-time-step class scores: [1, T, C] (batch first, PaddleOCR) or [T, 1, C] (time
first, the layout of a PyTorch CRNN); the class axis is last. Greedy decode takes the best class per
step, collapses repeats and drops the blank. With a charset the classes become characters; without
one, strings are sequences of class indices (exact match and CER are the same on either).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.sdk.errors import TerminalError
from backends.tasks.base import TaskMetric, TaskScore, output_index
from backends.tasks.config import Ctc

Text = tuple[str, ...] | tuple[int, ...]


def steps(scores: Any) -> Any:
    """[T, C] from [1, T, C], [T, 1, C] or [T, C]."""
    import numpy as np

    a = np.asarray(scores)
    if a.ndim == 3 and a.shape[0] == 1:
        return a[0]
    if a.ndim == 3 and a.shape[1] == 1:
        return a[:, 0]
    if a.ndim == 2:
        return a
    raise TerminalError(f"a ctc output must be [1, T, C], [T, 1, C] or [T, C], got shape {list(a.shape)}")


def greedy(scores: Any, blank: int) -> tuple[int, ...]:
    import numpy as np

    best = np.argmax(steps(scores), axis=-1).tolist()
    out: list[int] = []
    previous = None
    for k in best:
        if k != previous and k != blank:
            out.append(int(k))
        previous = k
    return tuple(out)


def characters(indices: Sequence[int], charset: Sequence[str] | None, blank: int, classes: int) -> Text:
    """Class indices as characters: a charset of C lines maps class k to line k; one of C - 1 lines
    lists the non-blank classes in order (PaddleOCR's dict files)."""
    if charset is None:
        return tuple(indices)
    if len(charset) == classes:
        return tuple(charset[k] for k in indices)
    if len(charset) == classes - 1:
        return tuple(charset[k if k < blank else k - 1] for k in indices)
    raise TerminalError(
        f"evaluate.task.charset has {len(charset)} entries; the model has {classes} classes "
        f"(give {classes} lines, or {classes - 1} without the blank)"
    )


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance (insertions, deletions, substitutions each cost 1)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            current = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
            previous = current
    return row[len(b)]


class CtcMetric(TaskMetric):
    task = "ctc"

    def __init__(self, config: Ctc, names: Sequence[str], labelled: bool) -> None:
        super().__init__(names, labelled)
        if labelled and config.charset is None:
            raise TerminalError("evaluate.labels of a ctc task are text: set evaluate.task.charset")
        self.config = config
        self.index = output_index(names, config.output, self.task)
        self.exact = self.reference_exact = 0
        self.edits = self.reference_edits = self.chars = 0

    def decode(self, scores: Any) -> Text:
        classes = int(steps(scores).shape[-1])
        indices = greedy(scores, self.config.blank)
        return self._fold(characters(indices, self.config.charset, self.config.blank, classes))

    def _fold(self, text: Text) -> Text:
        if self.config.case_sensitive:
            return text
        return tuple(c.casefold() if isinstance(c, str) else c for c in text)  # type: ignore[return-value]

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        ref, out = self.decode(reference[self.index]), self.decode(outputs[self.index])
        truth: Text = self._fold(tuple(str(label))) if self.labelled else ref
        self.exact += int(out == truth)
        self.edits += edit_distance(out, truth)
        self.chars += len(truth)
        if self.labelled:
            self.reference_exact += int(ref == truth)
            self.reference_edits += edit_distance(ref, truth)

    def result(self) -> TaskScore:
        if not self.samples:
            raise TerminalError("ctc needs at least one sample")
        n, chars = self.samples, max(1, self.chars)
        cer = self.edits / chars
        ref_cer = self.reference_edits / chars if self.labelled else 0.0
        exact = self.exact / n
        ref_exact = self.reference_exact / n if self.labelled else 1.0
        extra = {"exact_match": exact, "cer": cer, "reference_cer": ref_cer}
        truth = "labels" if self.labelled else "the float model's strings"
        if not self.config.case_sensitive:
            truth += ", case-folded"
        if self.config.metric == "char_accuracy":
            text = f"character accuracy (1 - CER, greedy CTC decode) against {truth}"
            return TaskScore(
                self.task,
                "char_accuracy",
                text,
                self.against,
                max(0.0, 1 - cer),
                max(0.0, 1 - ref_cer),
                extra,
            )
        text = f"string exact match (greedy CTC decode, blank {self.config.blank}) against {truth}; CER {cer:.4f}"
        return TaskScore(self.task, "exact_match", text, self.against, exact, ref_exact, extra)
