"""Path fields: declared by SpecPath markers on the models, found by walking them, generated into a table."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import pytest
from pydantic import BaseModel, Field

from reconciler.spec import load, models
from reconciler.spec._semantic import data_errors
from reconciler.spec.pathfields import (
    PATH_FIELDS,
    TABLE_FILE,
    PathField,
    SpecPath,
    declared,
    named,
    table_source,
    value,
)
from tests.spec.conftest import GOOD, Repo, edit


def test_the_generated_table_is_fresh() -> None:
    assert TABLE_FILE.read_text() == table_source(), "run: python -m reconciler.spec.pathfields"
    assert declared(models.DeploymentSpec) == PATH_FIELDS


class _Leaf(BaseModel):
    file: Annotated[str, SpecPath("file", input="leaf")] | None = None
    note: str = ""


class _A(BaseModel):
    type: Literal["a"]
    where: Annotated[str, SpecPath("folder", input="where")]


class _B(BaseModel):
    type: Literal["b"]
    other: str = ""


class _Root(BaseModel):
    ref: Annotated[str, SpecPath("file", input="ref", package="pkg")]
    pkg: str | None = None
    leaf_: _Leaf | None = Field(default=None, alias="leaf")
    variant: Annotated[_A | _B, Field(discriminator="type")] | None = None


def test_declared_walks_aliases_optionals_and_unions() -> None:
    assert declared(_Root) == (
        PathField("ref", "file", "ref", package="pkg"),
        PathField("leaf.file", "file", "leaf"),
        PathField("variant.where", "folder", "where"),
    )


class _Listed(BaseModel):
    leaves: list[_Leaf] = []


class _Mapped(BaseModel):
    files: dict[str, Annotated[str, SpecPath("file", input="x")]] = {}


@pytest.mark.parametrize("model", [_Listed, _Mapped])
def test_a_path_a_dotted_name_cannot_reach_is_refused(model: type[BaseModel]) -> None:
    with pytest.raises(TypeError, match="inside a list or mapping"):
        declared(model)


def _string_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str]]:
    """(dotted, description) of every string field reachable from `model` (union arms included)."""
    out: list[tuple[str, str]] = []
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{info.alias or name}"
        text = repr(info.annotation)
        if "str" in text:
            out.append((dotted, info.description or ""))
        for sub in _models_in(info.annotation):
            out += _string_fields(sub, dotted + ".")
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def test_every_field_documented_as_spec_relative_is_declared_a_path() -> None:
    """A new field that names a file must carry the SpecPath marker, or extends would not rebase it,
    validation would not confine it, watch would not watch it and no stage key would hold its digest.
    The models' own descriptions say which fields are paths; this holds them to it."""
    documented = {
        dotted
        for dotted, description in _string_fields(models.DeploymentSpec)
        if "relative to the spec" in description
    }
    assert documented == {f.dotted for f in PATH_FIELDS}
    assert "evaluate.task.charset" in documented  # the walk reaches union arms (task_models)


def test_values_of_a_raw_or_validated_spec() -> None:
    spec = {
        "model": {"path": "m.onnx"},
        "quantization": {"calibration": None},
        "evaluate": {"data": "d", "task": {"type": "detection"}},
    }
    by_name = {f.dotted: f for f in PATH_FIELDS}
    assert value(spec, by_name["evaluate.task.charset"]) is None  # another arm of the task union
    assert value(spec, by_name["quantization.calibration.data"]) is None  # under a null parent
    assert [(f.dotted, v) for f, v in named(spec)] == [("model.path", "m.onnx"), ("evaluate.data", "d")]
    assert list(named(None)) == []


def test_a_charset_outside_the_repository_is_refused(repo: Repo) -> None:
    """Confinement covers every declared path, the charset of a ctc task too."""
    repo.write("specs/charset.txt", "a\nb\n")
    text = edit(GOOD, {21: "    labels: ../data/eval/labels.txt\n    task: {type: ctc, charset: CHARSET}"})
    inside = load(repo.write("specs/a.yaml", text.replace("CHARSET", "charset.txt")), repo.root)
    assert data_errors(inside, repo.root) == []
    outside = load(repo.write("specs/a.yaml", text.replace("CHARSET", "../../outside.txt")), repo.root)
    (error,) = data_errors(outside, repo.root)
    assert error.field == "spec.evaluate.task.charset" and "outside" in error.message
