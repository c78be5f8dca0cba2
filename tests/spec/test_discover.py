"""Which files are specs: one named like a lock file, or too long for its lock file's name to exist, is
an error of that file (never skipped, never an OSError), and the other specs are found as before."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.spec._discover import discover_with_errors
from tests.conftest import DIGITS_SPEC, run_npuctl

SPEC = DIGITS_SPEC.format(name="x")


def test_a_spec_named_like_a_lock_file_is_an_error_and_foreign_lock_yaml_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "x.lock.yaml").write_text(SPEC)
    (tmp_path / "conda.lock.yml").write_text("kind: Environment\ndependencies: []\n")
    (tmp_path / "ok.yaml").write_text(SPEC)
    files, errors = discover_with_errors([tmp_path], tmp_path)
    assert files == [tmp_path / "ok.yaml"]
    assert [(e.file.name, e.line) for e in errors] == [("x.lock.yaml", 0)]
    assert "*.lock.yaml" in errors[0].message and "rename it" in errors[0].message


def test_a_spec_whose_lock_file_name_cannot_exist_is_an_error(tmp_path: Path) -> None:
    longest = "a" * (255 - len(".lock.json") - len("..12345678.tmp"))
    (tmp_path / f"{longest}.yaml").write_text(SPEC)
    (tmp_path / f"{longest}b.yaml").write_text(SPEC)
    files, errors = discover_with_errors([tmp_path], tmp_path)
    assert files == [tmp_path / f"{longest}.yaml"]
    assert [e.file.name for e in errors] == [f"{longest}b.yaml"]
    assert "file name too long" in errors[0].message and "by 1 characters" in errors[0].message


def test_a_246_character_spec_name_blocks_no_other_spec(digits_repo: Path) -> None:
    long_name = "a" * 241 + ".yaml"
    assert len(long_name) == 246
    (digits_repo / "specs" / long_name).write_text(DIGITS_SPEC.format(name="long"))
    for command in ("validate", "plan"):
        done = run_npuctl(digits_repo, command)
        said = done.stdout + done.stderr
        assert "internal error" not in said and "Errno 36" not in said, said
        assert f"specs/{long_name}: file name too long" in said, said
        assert done.returncode == 1, said
    status = run_npuctl(digits_repo, "status", "--json")
    rows = {r["name"]: r for r in json.loads(status.stdout)["specs"]}
    assert status.returncode == 0 and "file name too long" in rows[long_name.split(".")[0]]["reason"]
    assert rows["digits"]["status"] == "OutOfSync"  # not built yet, and not held up
