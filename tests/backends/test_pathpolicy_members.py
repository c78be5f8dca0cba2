"""pathpolicy.members lists a shared data folder once per process, and never returns a stale list."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from backends.sdk import pathpolicy


def _tick() -> None:
    time.sleep(0.05)  # past the file system's timestamp tick, so the folder's stat changes


def _folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("a.npy", "b.npy", ".hidden"):
        (data / name).write_bytes(b"x")
    return data


def test_an_unchanged_folder_is_listed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pathpolicy, "_SETTLED_NS", 0)
    monkeypatch.setattr(pathpolicy, "_LISTED", {})
    data = _folder(tmp_path)
    _tick()
    calls = []
    real = os.scandir
    monkeypatch.setattr(pathpolicy.os, "scandir", lambda p: calls.append(p) or real(p))
    first = pathpolicy.members(data, tmp_path)
    assert [p.name for p in first] == ["a.npy", "b.npy"]
    assert pathpolicy.members(data, tmp_path) == first and len(calls) == 1
    assert [p.name for p in pathpolicy.members(data, tmp_path, [".npy"])] == ["a.npy", "b.npy"]
    assert len(calls) == 2  # another suffix filter is another listing


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_member_added_or_replaced_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pathpolicy, "_SETTLED_NS", 0)
    monkeypatch.setattr(pathpolicy, "_LISTED", {})
    data = _folder(tmp_path)
    _tick()
    assert len(pathpolicy.members(data, tmp_path)) == 2
    _tick()
    (data / "c.npy").write_bytes(b"x")
    assert [p.name for p in pathpolicy.members(data, tmp_path)] == ["a.npy", "b.npy", "c.npy"]
    _tick()
    (data / "b.npy").unlink()
    os.mkfifo(data / "b.npy")
    with pytest.raises(pathpolicy.PathRefused, match=r"b\.npy"):
        pathpolicy.members(data, tmp_path)


def test_a_folder_changed_just_now_or_holding_a_symlink_is_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pathpolicy, "_LISTED", {})
    data = _folder(tmp_path)
    pathpolicy.members(data, tmp_path)
    assert not pathpolicy._LISTED, "changed within the last 2 s"
    monkeypatch.setattr(pathpolicy, "_SETTLED_NS", 0)
    (tmp_path / "elsewhere.npy").write_bytes(b"x")
    os.symlink(tmp_path / "elsewhere.npy", data / "link.npy")
    _tick()
    assert [p.name for p in pathpolicy.members(data, tmp_path)] == ["a.npy", "b.npy", "link.npy"]
    assert not pathpolicy._LISTED, "a symlink's target can change without the folder's stat"
