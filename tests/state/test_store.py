from __future__ import annotations

import hashlib
from pathlib import Path

from reconciler.state.store import Store


def test_put_names_object_by_content_and_consumes_source(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    src = tmp_path / "a.bin"
    src.write_bytes(b"model bytes")
    digest = store.put(src)
    assert digest == hashlib.sha256(b"model bytes").hexdigest()
    assert store.path(digest).read_bytes() == b"model bytes"
    assert not src.exists()
    assert store.verify() == []


def test_put_same_content_twice_keeps_one_object(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(b"same")
    assert store.put(tmp_path / "a") == store.put(tmp_path / "b")
    assert len(list(store.digests())) == 1


def test_objects_are_read_only_and_verify_catches_tampering(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    (tmp_path / "a").write_bytes(b"x")
    digest = store.put(tmp_path / "a")
    path = store.path(digest)
    assert path.stat().st_mode & 0o222 == 0
    path.chmod(0o644)
    path.write_bytes(b"tampered")
    assert store.verify() == [digest]


def test_temp_files_are_not_objects(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    (tmp_path / "store" / "ab").mkdir(parents=True)
    (tmp_path / "store" / "ab" / ".tmp-123").write_bytes(b"half written")
    assert list(store.digests()) == []
    assert store.stale_temp_files() == [tmp_path / "store" / "ab" / ".tmp-123"]
