"""A stage's task and labels from its request: the one way evaluate, the auto search and any runner-
specific evaluate read `evaluate.task`, `evaluate.labels` and `evaluate.metric`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backends.sdk.errors import TerminalError
from backends.tasks import labels as _labels
from backends.tasks.config import Classification, TaskConfig, from_evaluate, resolve


def declared(
    evaluate: Mapping[str, Any] | None, inputs: Mapping[str, Any], model: Path | None
) -> TaskConfig | None:
    """The task of `evaluate` with what the graph of `model` decides filled in; None for the generic
    measure. Without a task, integer labels imply classification in `evaluate.metric` (top1/top5)."""
    evaluate = evaluate or {}
    charset = inputs.get("charset")
    task = from_evaluate(evaluate, Path(charset) if charset is not None else None)
    if task is None and inputs.get("labels") is not None and evaluate.get("metric", "top1") != "fidelity":
        task = Classification(metric=evaluate.get("metric", "top1"), implied=True)
    return resolve(task, model)


def sample_labels(
    evaluate: Mapping[str, Any] | None,
    inputs: Mapping[str, Any],
    task: TaskConfig | None,
    names: Sequence[str],
) -> list[Any] | None:
    """Each sample's label in order, or None to measure against the float model."""
    evaluate = evaluate or {}
    path = inputs.get("labels")
    if path is None or (task is None and evaluate.get("metric") == "fidelity"):
        return None
    if inputs.get("eval_data") is None:
        raise TerminalError(
            "evaluate.labels is set but evaluate.data is not: labels need the samples they label"
        )
    found = _labels.read(task, Path(path))
    return _labels.for_samples(list(names), found, f"evaluate.labels ({Path(path).name})")


def task_and_labels(
    evaluate: Mapping[str, Any] | None, inputs: Mapping[str, Any], model: Path, names: Sequence[str]
) -> tuple[TaskConfig | None, list[Any] | None]:
    """`declared` and `sample_labels` together: what every evaluate scores with."""
    task = declared(evaluate, inputs, model)
    return task, sample_labels(evaluate, inputs, task, names)
