"""The remote cache on a real file system (file://): verified reads, write-then-rename, safe concurrency.

The servers (sshd for SFTP, an S3 API emulator) are in the end-to-end tests beside this one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.engine import keys
from reconciler.remote.cache import Remote
from reconciler.remote.config import RemoteConfig
from reconciler.state.db import Record
from reconciler.state.store import Store
from reconciler.trust.keys import SigningKey
from reconciler.trust.policy import Policy
from reconciler.trust.signing import Trust
from tests.conftest import run_npuctl

TRUST = Trust(Policy(), SigningKey(Ed25519PrivateKey.generate(), "a key made for these tests"))
"""This machine's trust: no policy, its own key (which it trusts)."""


def _record(store: Store, tmp: Path, payload: bytes, stage: str = "compile") -> Record:
    source = tmp / f"artifact-{hashlib.sha256(payload).hexdigest()[:8]}"
    source.write_bytes(payload)
    digest = store.put(source)
    key_inputs = {"stage": stage, "fields": {"payload": len(payload)}}
    artifacts = {"model": {"digest": digest, "file": "model.bin", "size": len(payload)}}
    report = {"nodes": 3}
    out = keys.output_digest({"model": digest}, report)
    return Record(keys.digest(key_inputs), stage, key_inputs, artifacts, report, out, "")


def _remote(url: str, warnings: list[str]) -> Remote:
    return Remote(RemoteConfig(url), warnings.append)


def test_push_then_fetch_gives_the_same_record_and_bytes(tmp_path: Path) -> None:
    here, there = Store(tmp_path / "here"), Store(tmp_path / "there")
    record = _record(here, tmp_path, b"weights" * 1000)
    warnings: list[str] = []
    remote = _remote(f"file://{tmp_path}/remote", warnings)
    assert remote.push(record, here, tmp_path / "tmp", TRUST)
    other = _remote(f"file://{tmp_path}/remote", warnings)
    fetched = other.record(record.key, TRUST)
    assert fetched == record
    digest = record.artifacts["model"]["digest"]
    assert other.fetch_object(digest, 7000, there, tmp_path / "tmp2")
    assert hashlib.sha256(there.path(digest).read_bytes()).hexdigest() == digest
    assert (other.stats.records_fetched, other.stats.objects_fetched, other.stats.bytes_fetched) == (
        1,
        1,
        7000,
    )
    assert not warnings
    assert not list((tmp_path / "remote" / "tmp").iterdir())  # nothing left in flight


def test_a_flipped_byte_in_an_object_is_caught_and_the_next_push_repairs_it(tmp_path: Path) -> None:
    here, there = Store(tmp_path / "here"), Store(tmp_path / "there")
    record = _record(here, tmp_path, bytes(range(256)) * 40)
    warnings: list[str] = []
    remote = _remote(f"file://{tmp_path}/remote", warnings)
    remote.push(record, here, tmp_path / "tmp", TRUST)
    digest = record.artifacts["model"]["digest"]
    obj = tmp_path / "remote" / "objects" / digest[:2] / digest[2:]
    data = bytearray(obj.read_bytes())
    data[100] ^= 0x01
    obj.write_bytes(bytes(data))
    assert not remote.fetch_object(digest, len(data), there, tmp_path / "tmp")
    assert not there.has(digest)
    assert len(warnings) == 1 and digest[:12] in warnings[0] and "does not verify" in warnings[0]
    assert remote.down is None  # a bad object is a miss, not a dead remote
    remote.push(record, here, tmp_path / "tmp", TRUST)
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest


def test_a_tampered_or_misfiled_record_is_a_miss_with_a_warning(tmp_path: Path) -> None:
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"abc")
    other = _record(here, tmp_path, b"abcd")
    warnings: list[str] = []
    _remote(f"file://{tmp_path}/remote", warnings).push(record, here, tmp_path / "tmp", TRUST)
    path = tmp_path / "remote" / "records" / f"{record.key}.json"
    data = json.loads(path.read_bytes())
    data["report"]["nodes"] = 4  # a measurement edited on the remote
    path.write_text(json.dumps(data))
    assert _remote(f"file://{tmp_path}/remote", warnings).record(record.key, TRUST) is None
    assert "output digest" in warnings[-1]
    misfiled = tmp_path / "remote" / "records" / f"{other.key}.json"
    misfiled.write_bytes(path.read_bytes())  # a valid record stored under another key
    assert _remote(f"file://{tmp_path}/remote", warnings).record(other.key, TRUST) is None
    assert "do not hash to its key" in warnings[-1]


def test_a_partial_upload_is_never_a_hit(tmp_path: Path) -> None:
    """What a push killed half-way leaves: objects without their record, a file in tmp/."""
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"x" * 5000)
    root = tmp_path / "remote"
    digest = record.artifacts["model"]["digest"]
    (root / "tmp").mkdir(parents=True)
    (root / "tmp" / "abc.part").write_bytes(b"x" * 100)
    (root / "objects" / digest[:2]).mkdir(parents=True)
    (root / "objects" / digest[:2] / digest[2:]).write_bytes(b"x" * 5000)
    warnings: list[str] = []
    assert _remote(f"file://{root}", warnings).record(record.key, TRUST) is None
    assert not warnings


def test_concurrent_pushes_of_one_key_leave_one_valid_record(tmp_path: Path) -> None:
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"y" * 200_000)
    warnings: list[str] = []
    remotes = [_remote(f"file://{tmp_path}/remote", warnings) for _ in range(8)]
    start = threading.Barrier(len(remotes))

    def push(remote: Remote, n: int) -> None:
        start.wait()
        remote.push(record, here, tmp_path / f"tmp{n}", TRUST)

    threads = [threading.Thread(target=push, args=(r, n)) for n, r in enumerate(remotes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not warnings
    fetched = _remote(f"file://{tmp_path}/remote", warnings).record(record.key, TRUST)
    assert fetched == record
    assert not list((tmp_path / "remote" / "tmp").iterdir())


def test_an_unreachable_remote_warns_once_and_is_then_left_alone(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"z")
    warnings: list[str] = []
    remote = _remote(f"sftp://127.0.0.1:{port}/cache", warnings)
    assert remote.record(record.key, TRUST) is None
    assert remote.down is not None
    assert not remote.push(record, here, tmp_path / "tmp", TRUST)
    assert remote.record("0" * 64, TRUST) is None
    assert len(warnings) == 1 and "continuing without the remote" in warnings[0]


def test_a_remote_that_stops_answering_is_dropped_after_its_deadline(tmp_path: Path) -> None:
    """A read that never returns (here: a FIFO nobody writes, as a hung mount or a dead peer whose
    connection was never closed behaves) costs one deadline, then the run goes on without it."""
    import os

    key = "a" * 64
    (tmp_path / "remote" / "records").mkdir(parents=True)
    os.mkfifo(tmp_path / "remote" / "records" / f"{key}.json")
    warnings: list[str] = []
    remote = Remote(RemoteConfig(f"file://{tmp_path}/remote"), warnings.append, timeout_s=1.0)
    assert remote.record(key, TRUST) is None
    assert remote.down is not None and "no answer in 1 s" in remote.down
    assert remote.record("b" * 64, TRUST) is None  # not asked again
    assert len(warnings) == 1


def test_a_record_larger_than_the_bound_is_refused_without_reading_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is read in one call bounded at MAX_RECORD_BYTES + 1 bytes: a bigger file is a corrupt
    copy (built here), and no more of it than the bound is read."""
    from reconciler.remote import cache

    monkeypatch.setattr(cache, "MAX_RECORD_BYTES", 1000)
    key = "d" * 64
    (tmp_path / "remote" / "records").mkdir(parents=True)
    (tmp_path / "remote" / "records" / f"{key}.json").write_bytes(b"{" + b" " * 50_000 + b"}")
    warnings: list[str] = []
    remote = Remote(RemoteConfig(f"file://{tmp_path}/remote"), warnings.append)
    fs, _ = remote._open()
    reads: list[tuple[Any, ...]] = []
    real = fs._fs.cat_file

    def spy(path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        data = real(path, start=start, end=end, **kwargs)
        reads.append((start, end, len(data)))
        return bytes(data)

    monkeypatch.setattr(fs._fs, "cat_file", spy)
    assert remote.record(key, TRUST) is None and remote.down is None
    assert reads == [(0, 1001, 1001)] and remote.stats.remote_calls == 1
    assert any("exceeds 1000 bytes" in w for w in warnings), warnings


def test_an_http_remote_is_read_only_and_verified(tmp_path: Path) -> None:
    """A shared folder published by a real HTTP server on 127.0.0.1 (port 0): fetches verify, pushes
    are refused without touching it."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    here, there = Store(tmp_path / "here"), Store(tmp_path / "there")
    record = _record(here, tmp_path, b"served" * 300)
    warnings: list[str] = []
    assert _remote(f"file://{tmp_path}/site", warnings).push(record, here, tmp_path / "tmp", TRUST)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        remote = _remote(url, warnings)
        assert remote.record(record.key, TRUST) == record
        digest = record.artifacts["model"]["digest"]
        assert remote.fetch_object(digest, 1800, there, tmp_path / "tmp2")
        assert there.has(digest)
        assert remote.record("c" * 64, TRUST) is None and remote.down is None  # a 404 is a miss
        before = sorted(p.name for p in (tmp_path / "site").rglob("*"))
        assert not remote.push(_record(here, tmp_path, b"new"), here, tmp_path / "tmp3", TRUST)
        assert sorted(p.name for p in (tmp_path / "site").rglob("*")) == before
    finally:
        server.shutdown()
        server.server_close()
    assert not warnings


def test_a_record_forged_with_every_hash_recomputed_is_ignored_with_one_line(tmp_path: Path) -> None:
    """Anyone who can write the remote can recompute the key and the output digest; not sign."""
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"abc")
    warnings: list[str] = []
    _remote(f"file://{tmp_path}/remote", warnings).push(record, here, tmp_path / "tmp", TRUST)
    path = tmp_path / "remote" / "records" / f"{record.key}.json"
    data = json.loads(path.read_bytes())
    data["report"]["nodes"] = 4
    digests = {n: a["digest"] for n, a in data["artifacts"].items()}
    data["output_digest"] = keys.output_digest(digests, data["report"])
    path.write_text(json.dumps(data))
    assert _remote(f"file://{tmp_path}/remote", warnings).record(record.key, TRUST) is None
    assert (
        len(warnings) == 1
        and "not from a trusted builder" in warnings[0]
        and "does not verify" in warnings[0]
    )


def test_a_record_signed_by_a_key_the_policy_does_not_name_is_ignored(tmp_path: Path) -> None:
    here = Store(tmp_path / "here")
    record = _record(here, tmp_path, b"abc")
    stranger = Trust(Policy(), SigningKey(Ed25519PrivateKey.generate(), "someone else's key"))
    warnings: list[str] = []
    _remote(f"file://{tmp_path}/remote", warnings).push(record, here, tmp_path / "tmp", stranger)
    assert _remote(f"file://{tmp_path}/remote", warnings).record(record.key, TRUST) is None
    assert len(warnings) == 1 and "a key the trust policy does not name" in warnings[0]
    named = Trust(Policy({stranger.sign(b"").get("key", ""): "ci"}), TRUST.own)
    assert _remote(f"file://{tmp_path}/remote", warnings).record(record.key, named) == record


class _Failing(BaseHTTPRequestHandler):
    """A server that fails every request with 500 (a broken cache behind a proxy)."""

    def _fail(self) -> None:
        self.send_response(500, "Internal Server Error")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _fail

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_remote_answering_500_is_down_with_the_status_not_a_miss(tmp_path: Path) -> None:
    warnings: list[str] = []
    with _serving(_Failing) as url:
        remote = _remote(url, warnings)
        assert remote.record("c" * 64, TRUST) is None
        assert remote.down is not None and "HTTP 500" in remote.down
        again = _remote(url, warnings)
        assert not again.has_record("d" * 64) and again.down is not None and "HTTP 500" in again.down
    assert len(warnings) == 2 and all("HTTP 500" in w for w in warnings)


def test_pull_and_push_against_a_failing_http_remote_exit_1_naming_the_status(digits_repo: Path) -> None:
    """An http(s) remote is read-only: push says so before contacting it (exit 1); pull of a record the
    local store lacks asks it, and a 500 is the remote failing (exit 1, the status named), never "not
    on the remote"."""
    assert run_npuctl(digits_repo, "apply").returncode == 0
    with _serving(_Failing) as url:
        done = run_npuctl(digits_repo, "push", "--remote", url)
        assert done.returncode == 1 and f"npuctl push: {url} is read-only" in done.stderr, done.stderr
        shutil.rmtree(digits_repo / ".npuctl")
        done = run_npuctl(digits_repo, "pull", "--remote", url)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert f"npuctl pull: {url} failed: RemoteAnswered: HTTP 500" in done.stderr, done.stderr
        assert "not on the remote" not in done.stdout or " 0 not on the remote" in done.stdout
