"""The stat cache's three rules: the stat key, the racy rule, the cache file; and the switch that turns
every cache off without changing an answer."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.spec import _summary, check
from reconciler.state import statcache
from reconciler.state.db import Database
from reconciler.state.hashcache import FileHasher
from tests.spec.conftest import GOOD, GOOD_CLS, make_repo


@contextmanager
def _caches_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(statcache.OFF_ENV, "1")
    statcache.enabled.cache_clear()
    try:
        yield
    finally:
        monkeypatch.delenv(statcache.OFF_ENV)
        statcache.enabled.cache_clear()


def _past_the_window() -> None:
    """Waits until a file changed before this call is older than the racy window."""
    time.sleep(statcache.RACY_NS / 1e9 + 0.05)


# the key ------------------------------------------------------------------------------------------


def test_the_key_is_inode_device_size_mtime_and_ctime(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    st = os.stat(path)
    assert statcache.key(st) == (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert statcache.stat_of(path) == list(statcache.key(st))  # what a cache file holds
    assert statcache.stat_of(tmp_path / "missing") is None
    assert statcache.stat_of("bad\0path") is None


def test_an_edit_that_keeps_size_and_mtime_changes_the_key_by_ctime(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    before = os.stat(path)
    time.sleep(0.05)  # past the kernel's coarse clock tick, so the ctime can move
    path.write_bytes(b"two")  # same size, same inode
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime put back
    after = os.stat(path)
    kept = ("st_ino", "st_dev", "st_size", "st_mtime_ns")
    assert [getattr(after, f) for f in kept] == [getattr(before, f) for f in kept]
    assert after.st_ctime_ns != before.st_ctime_ns
    assert statcache.key(after) != statcache.key(before)


def test_a_hardlink_changes_the_key_but_not_a_store_objects_linked_key(tmp_path: Path) -> None:
    path = tmp_path / "object"
    path.write_bytes(b"bytes")
    before = os.stat(path)
    time.sleep(0.05)
    os.link(path, tmp_path / "in-a-work-folder")
    after = os.stat(path)
    assert statcache.key(after) != statcache.key(before)
    assert statcache.linked_key(after) == statcache.linked_key(before)
    assert statcache.linked_key(after)[:4] == statcache.key(after)[:4]


# the racy rule ------------------------------------------------------------------------------------


def test_a_stat_is_trusted_only_when_the_file_changed_a_window_before_it_was_read() -> None:
    at = 1_700_000_000 * 10**9 + 123_456_789
    window = statcache.RACY_NS
    old, recent = at - window - 1, at - window + 1
    assert statcache.trusted((1, 2, 3, old, old), at)
    assert not statcache.trusted((1, 2, 3, recent, recent), at)
    assert not statcache.trusted((1, 2, 3, old, recent), at)  # a recent ctime: changed recently
    assert not statcache.trusted((1, 2, 3, recent, old), at)  # an mtime set after the change
    assert not statcache.trusted((1, 2, 3, at + 10**9, old), at)  # a future mtime
    assert not statcache.trusted(None, at)


def test_a_whole_second_stamp_gets_the_coarse_file_systems_window() -> None:
    changed = 1_700_000_000 * 10**9  # on a whole second: a file system that keeps seconds
    stat = (1, 2, 3, changed, changed)
    assert not statcache.trusted(stat, changed + statcache.RACY_NS + 1)
    assert not statcache.trusted(stat, changed + statcache.WHOLE_SECOND_RACY_NS)
    assert statcache.trusted(stat, changed + statcache.WHOLE_SECOND_RACY_NS + 1)


def test_a_file_written_just_now_is_not_trusted_and_is_once_the_window_passed(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    assert not statcache.trusted(statcache.stat_of(path), time.time_ns())
    _past_the_window()
    assert statcache.trusted(statcache.stat_of(path), time.time_ns())
    path.write_bytes(b"y")  # read before this write: the stat taken after it is not trusted
    assert not statcache.trusted(statcache.stat_of(path), time.time_ns() - 10**9)


# the cache file -----------------------------------------------------------------------------------


def test_written_whole_and_read_back(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "x.json"
    assert statcache.write(target, json.dumps({"a": [1, 2]}))
    assert statcache.read_json(target) == {"a": [1, 2]}
    assert not list(target.parent.glob("*.tmp"))


def test_oversized_fifo_missing_and_corrupt_files_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"pad": "x" * 200}))
    monkeypatch.setattr(statcache, "MAX_BYTES", 100)
    assert statcache.read_json(big) is None
    monkeypatch.setattr(statcache, "MAX_BYTES", 1000)
    assert statcache.read_json(big) == {"pad": "x" * 200}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert statcache.read_json(fifo) is None  # never waited on
    assert statcache.read_json(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert statcache.read_json(tmp_path / "bad.json") is None


def test_concurrent_writers_never_show_a_reader_half_a_file(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "shared.json"
    contents = [{"writer": w, "pad": str(w) * 50_000} for w in range(4)]
    seen: list[object] = []
    done = threading.Event()

    def write(content: dict[str, object]) -> None:
        for _ in range(30):
            assert statcache.write(target, json.dumps(content))

    def read() -> None:
        while not done.is_set():
            seen.append(statcache.read_json(target))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(c,)) for c in contents]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert statcache.read_json(target) in contents
    assert all(s is None or s in contents for s in seen)  # None: before the first rename only
    assert seen.count(None) < len(seen)
    assert not list(target.parent.glob("*.tmp"))


def test_the_cache_folder_is_under_the_state_folder_and_never_through_a_symlink(tmp_path: Path) -> None:
    assert statcache.folder(tmp_path / ".npuctl") == tmp_path / ".npuctl" / "cache"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / ".npuctl").symlink_to(elsewhere)
    assert statcache.folder(tmp_path / "linked" / ".npuctl") is None


# the off switch -----------------------------------------------------------------------------------


def test_off_nothing_is_trusted_and_there_is_no_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = (1, 2, 3, 0, 1)
    assert statcache.enabled() and statcache.trusted(old, time.time_ns())
    with _caches_off(monkeypatch):
        assert not statcache.enabled()
        assert statcache.folder(tmp_path / ".npuctl") is None
        assert not statcache.trusted(old, time.time_ns())
    monkeypatch.setenv(statcache.OFF_ENV, "0")
    statcache.enabled.cache_clear()
    assert statcache.enabled()


def _answers(root: Path) -> list[tuple[str, bool, list[str], object]]:
    return [
        (r.file.name, r.valid, [str(e) for e in r.errors], None if r.spec is None else r.spec.spec_json)
        for r in check([root / "specs"], root)
    ]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_off_validation_gives_the_same_answers_and_touches_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", GOOD_CLS)
    repo.write("specs/c.yaml", GOOD_CLS.replace("cls-cpu", "cls-bad").replace("target: cpu", "target: nope"))
    (repo.root / ".npuctl").mkdir()
    _past_the_window()
    on = _answers(repo.root)
    assert [valid for _, valid, _, _ in on] == [True, True, False]
    assert (repo.root / ".npuctl" / "cache" / "specs.json").is_file()
    assert _answers(repo.root) == on  # from the cache
    cached = _files(repo.root / ".npuctl")
    _summary._memo.clear()
    with _caches_off(monkeypatch), monkeypatch.context() as m:
        m.setattr(statcache, "read_json", lambda path: pytest.fail(f"read {path} with the caches off"))
        m.setattr(statcache, "write", lambda *a, **k: pytest.fail(f"wrote {a[0]} with the caches off"))
        assert _answers(repo.root) == on
        assert not _summary._memo
    assert _files(repo.root / ".npuctl") == cached


def test_off_the_file_hash_cache_reads_every_file_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(tmp_path / "state.db")
    model = tmp_path / "m"
    model.write_bytes(os.urandom(4096))
    _past_the_window()
    on = FileHasher(db)
    expected = on.file(model)
    on.flush()
    assert db.cached_hash(str(model.resolve())) is not None
    with _caches_off(monkeypatch):
        off = FileHasher(db)
        assert off.file(model) == expected
        assert off.bytes_read == 4096 and not off.pending  # the kept row is not used, nothing new kept
    again = FileHasher(db)
    assert again.file(model) == expected and again.bytes_read == 0


def test_a_racy_witness_carries_the_content_digest_and_is_checked_by_it(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.write_text('{"threshold": 8}\n')
    now = statcache.stat_of(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    racy = statcache.witness(str(path), now, time.time_ns() - 10**9, lambda p: digest)
    assert racy == [str(path), now, digest]
    assert statcache.witness(str(path), now, time.time_ns() - 10**9, lambda p: None) is None
    assert statcache.holds(racy, now)
    path.write_text('{"threshold": 9}\n')  # a rewrite within the tick: the same stat, say
    assert not statcache.holds(racy, now)
    _past_the_window()
    settled = statcache.stat_of(path)
    assert statcache.witness(str(path), settled, time.time_ns(), lambda p: pytest.fail("hashed")) == [
        str(path),
        settled,
    ]
    folder_digest = statcache.content_digest(str(tmp_path))
    (tmp_path / "new.yaml").write_text("")
    assert statcache.content_digest(str(tmp_path)) != folder_digest  # a folder's content: its names


def test_a_racy_witness_that_holds_becomes_plain_once_its_stat_is_past_the_window(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.write_text('{"threshold": 8}\n')
    now = statcache.stat_of(path)
    racy = [str(path), now, hashlib.sha256(path.read_bytes()).hexdigest()]
    assert not statcache.refreshed(racy, now, time.time_ns())  # still within the window: keep the digest
    _past_the_window()
    assert statcache.holds(racy, now) and statcache.refreshed(racy, now, time.time_ns())
    assert not statcache.refreshed([str(path), now], now, time.time_ns())  # already plain


def test_a_cache_file_is_rewritten_for_its_refreshed_witnesses_only_when_later_runs_save_reading() -> None:
    size = 8 << 20
    assert statcache.worth_rewriting(size // statcache.REWRITE_SHARE, size)
    assert not statcache.worth_rewriting(size // statcache.REWRITE_SHARE - 1, size)
    assert not statcache.worth_rewriting(0, 0)
