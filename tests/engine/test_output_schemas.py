from __future__ import annotations

import jsonschema

from reconciler.engine import output_schemas


def test_checked_in_output_schemas_are_in_sync() -> None:
    assert output_schemas.main(["--check"]) == 0, "run python -m reconciler.engine.output_schemas"


def test_output_schemas_are_valid_json_schemas() -> None:
    for schema in output_schemas.schemas().values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_every_schema_shares_one_id_scheme() -> None:
    import json
    from pathlib import Path

    from reconciler.spec.schema import SCHEMA_BASE

    folder = Path(__file__).resolve().parents[2] / "schemas"
    for path in sorted(folder.glob("*.schema.json")):
        assert json.loads(path.read_text())["$id"] == f"{SCHEMA_BASE}{path.name}", path.name


def test_every_json_output_matches_its_checked_in_schema(digits_repo: object) -> None:
    """The real commands' --json output, validated against the file in schemas/ (one per command)."""
    import json
    from pathlib import Path

    from tests.conftest import run_npuctl

    repo = Path(str(digits_repo))
    folder = Path(__file__).resolve().parents[2] / "schemas"
    assert run_npuctl(repo, "apply").returncode == 0
    commands = {
        "validate": ["validate", "--json"],
        "artifacts": ["artifacts", "digits", "--json"],
        "backends": ["backends", "--json"],
        "explain": ["explain", "digits", "--json"],
        "targets": ["targets", "--json"],
        "toolchains": ["toolchain", "list", "--json"],
        "gc": ["gc", "--dry-run", "--json"],
        "audit": ["audit", "--json"],
        "status": ["status", "--json"],
        "plan": ["plan", "--json"],
        "apply": ["apply", "--json"],
    }
    for name, args in commands.items():
        done = run_npuctl(repo, *args)
        assert done.returncode == 0, (args, done.stderr)
        schema = json.loads((folder / f"{name}.schema.json").read_text())
        errors = [
            e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(json.loads(done.stdout))
        ]
        assert errors == [], (name, errors[:3])
