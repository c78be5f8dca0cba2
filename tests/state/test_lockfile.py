from __future__ import annotations

import json
from pathlib import Path

from reconciler.state import lockfile


def test_write_is_deterministic_and_skips_identical_content(tmp_path: Path) -> None:
    path = tmp_path / "a.lock.json"
    data = {"b": 1, "a": {"z": [3, 2], "y": None}}
    assert lockfile.write(path, data) is True
    first = path.read_bytes()
    assert lockfile.write(path, {"a": {"y": None, "z": [3, 2]}, "b": 1}) is False
    assert path.read_bytes() == first
    assert first.index(b'"a"') < first.index(b'"b"')


def test_unreadable_lock_reads_as_absent(tmp_path: Path) -> None:
    path = tmp_path / "a.lock.json"
    path.write_text("{not json")
    assert lockfile.read(path) is None


def test_digests_lists_every_artifact(tmp_path: Path) -> None:
    data = {
        "variants": {
            "default": {
                "stages": {
                    "import": {"artifacts": {"model": {"digest": "a" * 64}}},
                    "compile": {"artifacts": {"m": {"digest": "b" * 64}}},
                }
            }
        }
    }
    assert lockfile.digests(data) == {"a" * 64, "b" * 64}


def test_write_removes_temp_files_a_killed_writer_left(tmp_path: Path) -> None:
    path = tmp_path / "digits.lock.json"
    dead = tmp_path / ".digits.lock.json.ab12cd34.tmp"
    dead.write_text("{half")
    other = tmp_path / ".other.lock.json.ab12cd34.tmp"  # another spec's: not this writer's to remove
    other.write_text("{")
    assert lockfile.write(path, {"a": 1})
    assert not dead.exists() and other.exists()
    assert json.loads(path.read_text()) == {"a": 1}
