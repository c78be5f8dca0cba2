"""Task defaults are written once, on backends.tasks.config's dataclasses: the spec's task models and
the backends' reading of a task section both take them from there."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from backends.tasks.config import Classification, Ctc, Dense, Detection, Tensor, Tokens, from_evaluate
from reconciler.spec import task_models
from reconciler.spec.task_models import (
    ClassificationTask,
    CtcTask,
    DenseTask,
    DetectionTask,
    RegressionTask,
    TokensTask,
)
from tests.backends.defaults_scan import in_file, literal_defaults

PAIRS: list[tuple[type[BaseModel], type]] = [
    (ClassificationTask, Classification),
    (DetectionTask, Detection),
    (CtcTask, Ctc),
    (DenseTask, Dense),
    (TokensTask, Tokens),
    (RegressionTask, Tensor),
]
TASK_MODELS = [model.__name__ for model, _ in PAIRS]


def test_no_task_default_is_restated_outside_the_dataclasses() -> None:
    assert in_file("reconciler/spec/task_models.py", TASK_MODELS) == []
    assert in_file("backends/tasks/config.py", ["from_evaluate"]) == []


def test_the_dataclasses_hold_the_defaults_the_scan_looks_for() -> None:
    """The definitions themselves are literals the scan finds (so finding none elsewhere means something)."""
    found = {value for _, _, value in in_file("backends/tasks/config.py", ["Detection"])}
    assert {0.25, 0.45, 0.5, 300, "auto", "f1"} <= found
    restated = (
        "class T:\n    x: float = Field(default=0.25)\n    y: int = 3\n"
        'def f(raw):\n    return raw.get("a", 1), raw.get("b") or "top1"\n'
    )
    assert literal_defaults(restated, ["T", "f"]) == [
        ("T", 2, 0.25),
        ("T", 3, 3),
        ("f", 5, 1),
        ("f", 5, "top1"),
    ]


@pytest.mark.parametrize(("model", "dataclass"), PAIRS)
def test_a_spec_task_and_the_backend_agree_on_every_default(model: type[BaseModel], dataclass: type) -> None:
    kind = dataclass().type
    spec_json = model.model_validate({"type": kind}).model_dump(mode="json")
    assert from_evaluate({"task": spec_json}) == from_evaluate({"task": {"type": kind}}) == dataclass()
    shared = {f.name for f in dataclasses.fields(dataclass)} & set(model.model_fields)
    for name in shared - {"type"}:
        default = model.model_fields[name].get_default(call_default_factory=True)
        backend = getattr(dataclass(), name)
        assert default == (list(backend) if isinstance(backend, tuple) else backend), name


def test_every_task_model_is_checked() -> None:
    models = [c for c in vars(task_models).values() if isinstance(c, type) and issubclass(c, BaseModel)]
    declared = {c.__name__ for c in models if c.__module__ == task_models.__name__}
    assert declared - {"_Strict"} == set(TASK_MODELS)
