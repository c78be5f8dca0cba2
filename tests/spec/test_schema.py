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
    assert "from" in body["$defs"]["Color"]["properties"]  # aliases, as written in YAML


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
        ({10: "    data_0: [1, 3, 0, 224]"}, ["spec", "inputs", "data_0", 2]),
    ],
)
def test_the_schema_rejects_what_the_loader_rejects(lines: dict[int, str], where: list[object]) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load(edit(GOOD, lines))))
    assert [list(e.absolute_path) for e in errors] == [where]


def test_repository_specs_validate_against_the_schema() -> None:
    """Full specs (not DeploymentBase files and not those using extends) are complete on their own."""
    validator = _validator()
    checked = 0
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("kind") != "Deployment" or "extends" in data:
            continue
        validator.validate(data)
        checked += 1
    assert checked >= 1
