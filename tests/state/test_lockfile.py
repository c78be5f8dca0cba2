from __future__ import annotations

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
