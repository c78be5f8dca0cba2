from __future__ import annotations

import os
import time
from pathlib import Path

from reconciler.state.db import Database
from reconciler.state.hashcache import FileHasher
from reconciler.state.statcache import RACY_NS


def _old(path: Path) -> None:
    """Back-date the mtime and wait out the racy window (the utime moved the ctime to now), so the
    file's stat may stand for its content."""
    past = time.time_ns() - 10 * RACY_NS
    os.utime(path, ns=(past, past))
    time.sleep(RACY_NS / 1e9 + 0.05)


def test_second_hash_reads_zero_bytes(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    model = tmp_path / "model.onnx"
    model.write_bytes(os.urandom(1 << 20))
    _old(model)
    first = FileHasher(db)
    digest = first.file(model)
    first.flush()
    assert first.bytes_read == 1 << 20
    second = FileHasher(db)
    assert second.file(model) == digest
    assert second.bytes_read == 0


def test_changed_file_is_rehashed(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    model = tmp_path / "m"
    model.write_bytes(b"a" * 100)
    _old(model)
    hasher = FileHasher(db)
    before = hasher.file(model)
    hasher.flush()
    model.write_bytes(b"b" * 100)  # same size; new mtime
    _old(model)
    after = FileHasher(db).file(model)
    assert after != before


def test_racy_file_is_not_cached(tmp_path: Path) -> None:
    """A file modified within the timestamp granularity could change again without its mtime moving."""
    db = Database(tmp_path / "state.db")
    model = tmp_path / "m"
    model.write_bytes(b"fresh")
    hasher = FileHasher(db)
    hasher.file(model)
    hasher.flush()
    assert db.cached_hash(str(model.resolve())) is None
    again = FileHasher(db)
    again.file(model)
    assert again.bytes_read == len(b"fresh")


def test_same_stat_different_inode_is_rehashed(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    model = tmp_path / "m"
    model.write_bytes(b"one")
    _old(model)
    hasher = FileHasher(db)
    first = hasher.file(model)
    hasher.flush()
    st = model.stat()
    replacement = tmp_path / "n"
    replacement.write_bytes(b"two")
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, model)
    assert FileHasher(db).file(model) != first


def test_folder_digest_covers_names_and_contents(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    folder = tmp_path / "calib"
    folder.mkdir()
    (folder / "a.npy").write_bytes(b"1")
    (folder / "b.npy").write_bytes(b"2")
    base = FileHasher(db).tree(folder)
    (folder / "b.npy").rename(folder / "c.npy")
    renamed = FileHasher(db).tree(folder)
    (folder / "c.npy").write_bytes(b"3")
    edited = FileHasher(db).tree(folder)
    assert len({base, renamed, edited}) == 3


def test_an_edit_that_keeps_size_and_mtime_is_rehashed(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    model = tmp_path / "m"
    model.write_bytes(b"one")
    _old(model)
    hasher = FileHasher(db)
    first = hasher.file(model)
    hasher.flush()
    before = model.stat()
    model.write_bytes(b"two")
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the ctime tells
    time.sleep(RACY_NS / 1e9 + 0.05)
    again = FileHasher(db)
    assert again.file(model) != first and again.bytes_read == 3


def test_a_store_objects_digest_survives_the_hardlinks_builds_make(tmp_path: Path) -> None:
    """Stage work folders hardlink store objects, which moves their ctime only: not a change."""
    db = Database(tmp_path / "state.db")
    stored = tmp_path / "store" / "ab"
    stored.parent.mkdir()
    stored.write_bytes(os.urandom(1000))
    stored.chmod(0o444)
    _old(stored)
    hasher = FileHasher(db)
    digest = hasher.stored(stored)
    hasher.flush()
    ctime = stored.stat().st_ctime_ns
    time.sleep(0.05)
    os.link(stored, tmp_path / "work-input")
    assert stored.stat().st_ctime_ns != ctime
    again = FileHasher(db)
    assert again.stored(stored) == digest and again.bytes_read == 0
