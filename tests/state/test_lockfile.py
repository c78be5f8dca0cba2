from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.state import lockfile


def test_write_is_deterministic_and_skips_identical_content(tmp_path: Path) -> None:
    path = tmp_path / "a.lock.json"
    data = {"b": 1, "a": {"z": [3, 2], "y": None}}
    assert lockfile.write(path, data) is True
    first = path.read_bytes()
    assert lockfile.write(path, {"a": {"y": None, "z": [3, 2]}, "b": 1}) is False
    assert path.read_bytes() == first
    assert first.index(b'"a"') < first.index(b'"b"')


CONFLICTED = (
    '{\n  "spec": "a",\n<<<<<<< HEAD\n  "health": "Healthy"\n=======\n  "health": "Degraded"\n>>>>>>> b\n}\n'
)


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        (CONFLICTED, ":3:1:", "merge-conflict marker <<<<<<<"),
        ('{\n  "spec": "a",\n  "variants": {\n', ":4:1:", "truncated JSON"),
        ('{\n  "spec": "a",\n  "target": "cp', ":3:13:", "truncated JSON"),
        ('{\n  "format_version": 99,\n  "spec": "a"\n}\n', ":2:3:", "format_version: 99"),
        ("[1, 2]\n", ":1:1:", "not list"),
    ],
)
def test_an_unreadable_lock_is_a_located_error_never_absent(
    tmp_path: Path, text: str, where: str, why: str
) -> None:
    path = tmp_path / "a.lock.json"
    path.write_text(text)
    with pytest.raises(lockfile.LockUnreadable) as caught:
        lockfile.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{where} ") and why in message and "\n" not in message
    with pytest.raises(lockfile.LockUnreadable):  # a write never replaces it
        lockfile.write(path, {"spec": "a"})
    assert path.read_text() == text


def test_an_absent_lock_reads_as_none(tmp_path: Path) -> None:
    assert lockfile.read(tmp_path / "a.lock.json") is None


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
