"""The checked-in lock and --json schemas are generated from the records, and the real commands'
output validates against them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from reconciler.records import schemas
from reconciler.spec.schema import SCHEMA_BASE

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "schemas"


def test_checked_in_schemas_are_up_to_date() -> None:
    for name in schemas.OUTPUTS:
        checked_in = (FOLDER / f"{name}.schema.json").read_text()
        assert checked_in == schemas.render(schemas.schema(name)), f"stale: run python -m {schemas.__name__}"
    assert schemas.main(["--check"]) == 0


def test_check_mode_detects_a_stale_or_missing_file(tmp_path: Path) -> None:
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1  # none written yet
    assert schemas.main(["--dir", str(tmp_path)]) == 0
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "lock.schema.json").write_text("{}\n")
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1


def test_every_generated_schema_is_a_valid_json_schema() -> None:
    for body in schemas.schemas().values():
        jsonschema.Draft202012Validator.check_schema(body)


def test_every_schema_file_is_generated_and_shares_one_id_scheme() -> None:
    """Every file in schemas/ is generated: the spec's from the spec models, the rest from the records."""
    files = {p.name for p in FOLDER.glob("*.schema.json")}
    assert files == {f"{name}.schema.json" for name in schemas.OUTPUTS} | {"deployment.schema.json"}
    for name in files:
        assert json.loads((FOLDER / name).read_text())["$id"] == f"{SCHEMA_BASE}{name}", name


def _errors(name: str, payload: object) -> list[str]:
    validator = jsonschema.Draft202012Validator(json.loads((FOLDER / f"{name}.schema.json").read_text()))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(payload)]


def test_the_lock_schema_rejects_what_the_lock_format_forbids() -> None:
    lock = json.loads((ROOT / "specs" / "digits-cpu.lock.json").read_text())
    assert _errors("lock", lock) == []
    variant = next(iter(lock["variants"]))
    stage = next(iter(lock["variants"][variant]["stages"]))
    for path, value in [
        (["format_version"], 1),
        (["variants", variant, "stages", stage, "key"], "not-a-digest"),
        (["variants", variant, "verdicts", 0, "verdict"], "passed"),
        (["variants", variant, "measurements", "size_mb", "value"], "7"),
        (["variants", variant, "typo"], 1),
    ]:
        bad = json.loads(json.dumps(lock))
        node = bad
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        assert _errors("lock", bad) != [], path
    del lock["variants"][variant]["measurements"]
    assert _errors("lock", lock) == [f"['variants', '{variant}']: 'measurements' is a required property"]


def test_every_json_output_matches_its_checked_in_schema(digits_repo: object) -> None:
    """The real commands' --json output, validated against the file in schemas/ (one per command)."""
    from tests.conftest import run_npuctl

    repo = Path(str(digits_repo))
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
        assert _errors(name, json.loads(done.stdout))[:3] == [], name
