"""Cache files are read back only when regular and bounded: `.npuctl` sits in an untrusted checkout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.state import cachefile


def test_written_whole_and_read_back(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "x.json"
    assert cachefile.write(target, json.dumps({"a": [1, 2]}))
    assert cachefile.read_json(target) == {"a": [1, 2]}
    assert not list(target.parent.glob("*.tmp"))


def test_oversized_fifo_missing_and_corrupt_files_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"pad": "x" * 200}))
    monkeypatch.setattr(cachefile, "MAX_BYTES", 100)
    assert cachefile.read_json(big) is None
    monkeypatch.setattr(cachefile, "MAX_BYTES", 1000)
    assert cachefile.read_json(big) == {"pad": "x" * 200}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert cachefile.read_json(fifo) is None  # never waited on
    assert cachefile.read_json(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert cachefile.read_json(tmp_path / "bad.json") is None
