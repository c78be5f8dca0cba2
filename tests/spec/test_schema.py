"""The checked-in JSON Schema is generated from the models, and agrees with the loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from reconciler.spec import schema
from tests.spec.conftest import GOOD, edit

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_schema_is_up_to_date() -> None:
    checked_in = (ROOT / "schemas" / "deployment.schema.json").read_text()
    assert checked_in == schema.render(), "stale schema: run `python -m reconciler.spec.schema`"
    assert schema.main(["--check"]) == 0


def test_check_mode_detects_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "deployment.schema.json"
    stale.write_text("{}\n")
    assert schema.main(["--check", "--output", str(stale)]) == 1
    assert schema.main(["--output", str(stale)]) == 0
    assert schema.main(["--check", "--output", str(stale)]) == 0


def test_schema_is_deterministic_and_identified() -> None:
    body = json.loads(schema.render())
    assert body["$id"] == schema.SCHEMA_ID and body["$schema"].endswith("2020-12/schema")
    assert body["title"] == "npuctl Deployment (npuctl/v1)"
    assert schema.render() == schema.render()
    assert body["additionalProperties"] is False
    assert "from" in body["$defs"]["PartialColor"]["properties"]  # aliases, as written in YAML


def _validator() -> jsonschema.protocols.Validator:
    body = json.loads((ROOT / "schemas" / "deployment.schema.json").read_text())
    cls = jsonschema.validators.validator_for(body)
    cls.check_schema(body)
    return cls(body)


def test_a_good_spec_validates_against_the_schema() -> None:
    _validator().validate(yaml.safe_load(GOOD))


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        ({15: "      smaples: 8"}, ["spec", "quantization", "calibration"]),
        ({12: "    mode: ptg"}, ["spec", "quantization", "mode"]),
        # a shape is a list of positive dims or "scalar" (anyOf): the error is reported at the input
        ({10: "    data_0: [1, 3, 0, 224]"}, ["spec", "inputs", "data_0"]),
        ({10: "    data_0: scalr"}, ["spec", "inputs", "data_0"]),
    ],
)
def test_the_schema_rejects_what_the_loader_rejects(lines: dict[int, str], where: list[object]) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load(edit(GOOD, lines))))
    assert [list(e.absolute_path) for e in errors] == [where]


def _npuctl_files() -> list[Path]:
    out = []
    for path in sorted([*(ROOT / "specs").rglob("*.y*ml"), *(ROOT / "examples").rglob("*.y*ml")]):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and str(data.get("apiVersion", "")).startswith("npuctl/"):
            out.append(path)
    return out


def test_every_spec_and_base_in_the_repository_validates_against_the_schema() -> None:
    """What an editor or check-jsonschema sees: single files, complete, extending or DeploymentBase."""
    validator = _validator()
    files = _npuctl_files()
    kinds = {
        (yaml.safe_load(p.read_text())["kind"], "extends" in yaml.safe_load(p.read_text())) for p in files
    }
    assert {("Deployment", True), ("DeploymentBase", False)} <= kinds, kinds
    for path in files:
        errors = [
            f"{list(e.absolute_path)}: {e.message}"
            for e in validator.iter_errors(yaml.safe_load(path.read_text()))
        ]
        assert errors == [], f"{path.relative_to(ROOT)}: {errors}"


def _spec(**spec: object) -> dict[str, object]:
    return {"apiVersion": "npuctl/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": spec}


COMPLETE = {"model": {"path": "m.onnx"}, "target": "cpu", "inputs": {"x": [1, 3, 8, 8]}}


def _all_messages(errors: object) -> list[str]:
    """Every message, with those of the alternatives inside anyOf failures."""
    out = []
    for error in errors:  # type: ignore[attr-defined]
        out.append(error.message)
        out.extend(_all_messages(error.context))
    return out


def _paths(data: dict[str, object]) -> list[tuple[list[object], str]]:
    return sorted((list(e.absolute_path), e.validator) for e in _validator().iter_errors(data))


def test_required_fields_are_required_only_where_nothing_is_inherited() -> None:
    assert _paths(_spec(**COMPLETE)) == []
    assert _paths(_spec(target="cpu")) == [(["spec"], "required")] * 2  # model, inputs
    assert _paths({**_spec(target="cpu"), "extends": "base.yaml"}) == []
    base = {"apiVersion": "npuctl/v1", "kind": "DeploymentBase", "spec": {"evaluate": {"runs": 3}}}
    assert _paths(base) == []
    assert _paths({**base, "metadata": {"labels": {"a": "b"}}}) == []
    # a Deployment always names itself, even when the rest is inherited
    assert _paths({"apiVersion": "npuctl/v1", "kind": "Deployment", "extends": "b.yaml"}) == [
        ([], "required")
    ]
    # a nested required field (resize height) is required in a complete spec, not under extends
    resize = {**COMPLETE, "preprocess": {"input": "x", "resize": {"width": 8}}}
    assert "'height' is a required property" in _all_messages(_validator().iter_errors(_spec(**resize)))
    assert _paths({**_spec(**resize), "extends": "b.yaml"}) == []


def test_values_are_checked_once_in_every_kind_of_file() -> None:
    bad = {**COMPLETE, "evaluate": {"runs": 0}}
    assert _paths(_spec(**bad)) == [(["spec", "evaluate", "runs"], "exclusiveMinimum")]
    assert _paths({**_spec(evaluate={"runs": 0}), "extends": "b.yaml"}) == [
        (["spec", "evaluate", "runs"], "exclusiveMinimum")
    ]
    base = {"apiVersion": "npuctl/v1", "kind": "DeploymentBase", "spec": {"evaluate": {"rnus": 3}}}
    assert _paths(base) == [(["spec", "evaluate"], "additionalProperties")]
    assert _paths({**base, "kind": "Deploymnet"}) != []


def test_target_is_an_enum_of_the_catalog_with_descriptions() -> None:
    import backends.catalog as catalog

    node = json.loads(schema.render())["$defs"]["PartialDeploymentSpec"]["properties"]["target"]
    assert node["enum"] == sorted(catalog.targets())
    assert len(node["enumDescriptions"]) == len(node["enum"]) and all(node["enumDescriptions"])
    assert _paths(_spec(**{**COMPLETE, "target": "cpuu"})) == [(["spec", "target"], "enum")]


def test_compile_options_follow_the_backend_that_builds_the_spec() -> None:
    ort = {**COMPLETE, "compile": {"options": {"execution_mode": "parallel"}}}
    assert _paths(_spec(**ort)) == []
    assert _paths(_spec(**{**ort, "target": "intel-npu"})) == [
        (["spec", "compile", "options", "execution_mode"], "enum")  # openvino's own execution_mode
    ]
    mem = {**COMPLETE, "target": "intel-npu", "compile": {"options": {"enable_mem_pattern": False}}}
    assert _paths(_spec(**mem)) == [(["spec", "compile", "options"], "additionalProperties")]
    ov = {**COMPLETE, "target": "intel-npu", "compile": {"options": {"performance_hint": "LATENCY"}}}
    assert _paths(_spec(**ov)) == []
    # compile.backend wins over the target's default backend
    override = {**COMPLETE, "compile": {"backend": "openvino", "options": {"performance_hint": "LATENCY"}}}
    assert _paths(_spec(**override)) == []
    assert _paths(_spec(**{**override, "compile": {"backend": "openvino", "options": {"x": 1}}})) == [
        (["spec", "compile", "options"], "additionalProperties")
    ]


@pytest.mark.parametrize(
    "task",
    [
        {"type": "classification", "metric": "top5"},
        {"type": "detection", "head": "yolox", "metric": "map", "score_threshold": 0.1},
        {"type": "ctc", "blank": 0, "charset": "chars.txt"},
        {"type": "dense", "threshold": 0.5},
        {"type": "regression", "outputs": ["embedding"]},
    ],
)
def test_every_task_validates_and_a_wrong_task_field_is_located(task: dict[str, object]) -> None:
    """evaluate.task is a union on `type`: each variant validates, in a complete spec too (where the
    required-only forms apply), and an unknown or out-of-range field fails at the task."""
    _validator().validate(_spec(**COMPLETE, evaluate={"task": task}))
    from reconciler.spec.models import Deployment

    Deployment.model_validate(_spec(**COMPLETE, evaluate={"task": task}))
    bad = _spec(**COMPLETE, evaluate={"task": {**task, "nms_iouu": 0.5}})
    assert [p for p, _ in _paths(bad)] == [["spec", "evaluate", "task"]]
