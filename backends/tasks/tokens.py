"""Per-token class scores of a sequence model (a tagger, a segmenter, a masked-language head): [N, T, C]
beside token ids [N, T], decoded as each token's best class (argmax over the last axis) and compared
with the float model's at the positions the padding mask keeps.

Padded positions are not the application's output: their scores are whatever the model computes for a
pad id, often far from any real value, and counting them measured 0.83 cosine on a segmenter whose int8
strings kept their segmentation 31.5 % of the time. So the token agreement pools the unpadded
positions of every sample, the sequence match counts the sequences whose every unpadded token agrees,
and the cosine beside them is over the unpadded positions' scores. Fidelity (cosine, SQNR) of every
output shaped like the mask is measured on the same positions (`scored_part`), so the auto search
ranks layers by the noise they add where it matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.passes.metrics import as_float, cosine
from backends.sdk.errors import TerminalError
from backends.tasks.base import TaskMetric, TaskScore, output_index
from backends.tasks.config import Tokens


def kept_positions(mask: Any, pad_value: int) -> Any:
    """[N, T] booleans: True where the mask marks a real token (its value is not `pad_value`)."""
    import numpy as np

    return np.asarray(mask).astype(np.int64) != pad_value


class TokensMetric(TaskMetric):
    task = "tokens"

    def __init__(self, config: Tokens, names: Sequence[str], labelled: bool) -> None:
        if labelled:
            raise TerminalError(
                "evaluate.labels: a tokens task is measured against the float model's tokens; remove the labels"
            )
        super().__init__(names, labelled)
        self.config = config
        self.index = output_index(names, config.output, self.task)
        self.reads = (config.mask,) if config.mask else ()
        self.tokens = self.positions = self.agree = 0
        self.sequences = self.matched = 0
        self.cosine = 0.0

    def kept(self, scores: Any) -> Any:
        """[N, T] booleans of the current sample: the positions the mask keeps (all without a mask)."""
        import numpy as np

        if scores.ndim != 3:
            raise TerminalError(
                f"a tokens task reads per-token scores [N, T, C]; output {self.names[self.index]} has shape "
                f"{list(scores.shape)}"
            )
        if self.config.mask is None:
            return np.ones(scores.shape[:2], dtype=bool)
        mask = np.asarray(self.feed[self.config.mask])
        if mask.shape != scores.shape[:2]:
            raise TerminalError(
                f"evaluate.task.mask: input {self.config.mask} has shape {list(mask.shape)}; output "
                f"{self.names[self.index]} {list(scores.shape)} needs [N, T] = {list(scores.shape[:2])}"
            )
        return kept_positions(mask, self.config.pad_value)

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        import numpy as np

        ref, out = as_float(reference[self.index]), as_float(outputs[self.index])
        keep = self.kept(ref)
        same = np.argmax(ref, axis=-1) == np.argmax(out, axis=-1)
        self.positions += int(keep.size)
        self.tokens += int(keep.sum())
        self.agree += int((same & keep).sum())
        rows = keep.any(axis=1)
        self.sequences += int(rows.sum())
        self.matched += int(((same | ~keep).all(axis=1) & rows).sum())
        if keep.any():
            self.cosine += cosine(ref[keep], out[keep]) * int(rows.sum())

    def scored_part(self, value: Any) -> Any:
        """An output shaped [N, T, ...] like the mask: its unpadded positions only."""
        import numpy as np

        if self.config.mask is None or self.config.mask not in self.feed:
            return value
        mask = np.asarray(self.feed[self.config.mask])
        a = np.asarray(value)
        if a.ndim < 2 or a.shape[:2] != mask.shape:
            return value
        return a[kept_positions(mask, self.config.pad_value)]

    def result(self) -> TaskScore:
        if not self.tokens:
            raise TerminalError(
                "tokens needs at least one unpadded token: every sample's mask marks every position as padding"
            )
        token_agreement = self.agree / self.tokens
        sequence_match = self.matched / self.sequences
        where = (
            f"the {self.tokens} unpadded of {self.positions} positions (mask {self.config.mask}, padding "
            f"where it is {self.config.pad_value})"
            if self.config.mask
            else f"all {self.tokens} positions (no padding mask)"
        )
        extra = {
            "token_agreement": token_agreement,
            "sequence_match": sequence_match,
            "cosine": self.cosine / self.sequences,
            "unpadded_fraction": self.tokens / self.positions,
        }
        if self.config.metric == "sequence_match":
            text = (
                f"sequences whose every token keeps the float model's class (argmax), over {where}; "
                f"token agreement {token_agreement:.4f}"
            )
            return TaskScore(self.task, "sequence_match", text, self.against, sequence_match, 1.0, extra)
        text = (
            f"per-token class (argmax) agreement with the float model over {where}; "
            f"sequence match {sequence_match:.4f}"
        )
        return TaskScore(self.task, "token_agreement", text, self.against, token_agreement, 1.0, extra)
