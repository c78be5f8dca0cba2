from __future__ import annotations

import jsonschema

from reconciler.engine import output_schemas


def test_checked_in_output_schemas_are_in_sync() -> None:
    assert output_schemas.main(["--check"]) == 0, "run python -m reconciler.engine.output_schemas"


def test_output_schemas_are_valid_json_schemas() -> None:
    for schema in output_schemas.schemas().values():
        jsonschema.Draft202012Validator.check_schema(schema)
