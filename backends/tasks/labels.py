"""Labels per task, read from `evaluate.labels`, keyed by sample file name.

- classification: `<file name> <integer class>` lines (backends.passes.data.read_labels);
- ctc: `<file name><TAB><text>` lines (or `<file name> <text>`: the text is everything after the first space);
- detection: a JSON object {"<file name>": [[x1, y1, x2, y2, class], ...]} in model-input pixels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backends.sdk.errors import TerminalError
from backends.tasks.config import Classification, Ctc, Detection, TaskConfig

MAX_LABELS_BYTES = 64 << 20


def _text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_LABELS_BYTES:
            raise TerminalError(f"evaluate.labels: {path.name} is larger than {MAX_LABELS_BYTES >> 20} MB")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TerminalError(f"evaluate.labels: cannot read {path.name}: {exc}") from exc


def read(task: TaskConfig | None, path: Path) -> dict[str, Any]:
    if isinstance(task, Detection):
        return _boxes(path)
    if isinstance(task, Ctc):
        return _strings(path)
    if task is None or isinstance(task, Classification):
        from backends.passes.data import read_labels

        return dict(read_labels(path))
    raise TerminalError(
        f"evaluate.labels: a {task.type} task is measured against the float model; remove the labels"
    )


def _strings(path: Path) -> dict[str, str]:
    labels: dict[str, str] = {}
    for number, raw in enumerate(_text(path).splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, text = line.partition("\t") if "\t" in line else line.partition(" ")
        if not sep or not name:
            raise TerminalError(f"{path.name}:{number}: expected '<file name><TAB><text>', got {line!r}")
        if name in labels:
            raise TerminalError(f"{path.name}:{number}: {name} is labelled twice")
        labels[name] = text
    if not labels:
        raise TerminalError(f"evaluate.labels: {path.name} has no labels")
    return labels


def _boxes(path: Path) -> dict[str, list[list[float]]]:
    try:
        raw = json.loads(_text(path))
    except ValueError as exc:
        raise TerminalError(f"evaluate.labels: {path.name} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise TerminalError(f"evaluate.labels: {path.name} must be an object of file name -> boxes")
    out: dict[str, list[list[float]]] = {}
    for name, boxes in raw.items():
        if not isinstance(boxes, list) or not all(
            isinstance(b, list) and len(b) == 5 and all(isinstance(v, (int, float)) for v in b) for b in boxes
        ):
            raise TerminalError(
                f"evaluate.labels: {path.name}: {name}: expected a list of [x1, y1, x2, y2, class] boxes"
            )
        out[str(name)] = [[float(v) for v in b] for b in boxes]
    return out


def for_samples(names: list[str], labels: dict[str, Any], source: str) -> list[Any]:
    """The label of every sample (by file name), in order; a sample without a label is an error."""
    from backends.passes.data import labels_for

    return labels_for(names, labels, source)
