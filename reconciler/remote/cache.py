"""A remote cache on any fsspec file system: stage records by key, artifacts by sha256.

Layout under the URL's path:

    records/<key>.json          one stage record (key inputs, artifact digests, report)
    objects/<d[:2]>/<d[2:]>     artifact bytes, named by their sha256
    tmp/                        uploads in flight (file systems that rename)

Artifacts go up before the record naming them, and each object appears under its final name only
when complete: object stores (S3, GCS) make a PUT visible whole; on the others the upload goes to
`tmp/` and is renamed into place. So a record on the remote means its artifacts are there, a partial
upload is never a hit.

Nothing read from the remote is trusted on its word: a record must hash to the key it is stored under,
its output digest must match its artifacts and report, and it must be signed by a key trusted here
(the repository's trust policy or this machine's own, reconciler.trust), since anyone who can write
the remote can recompute every hash; an artifact must hash to its digest. Whatever
fails is a one-line warning and a miss (the stage builds here, and the next push replaces the bad
copy). The first failure of the remote itself (unreachable, refused, timed out) turns it off for the
rest of the run, with one warning: the build goes on locally.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine import keys
from reconciler.remote.config import READ_ONLY, RemoteConfig
from reconciler.state.db import Record
from reconciler.state.store import Store, sha256_file
from reconciler.trust.signing import Trust

MAX_RECORD_BYTES = 16 << 20
"""Largest record accepted from a remote (latency samples make evaluate's the biggest: a few kB)."""
FORMAT = 1

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_OBJECT_STORES = ("s3", "s3a", "gs", "gcs")


class Corrupt(ValueError):
    """What the remote holds does not verify; the message says what differs."""


class RemoteAnswered(OSError):
    """The remote's server answered with an error status: a failure of the remote, not a miss."""


ABSENT_STATUSES = (404, 410)
"""HTTP statuses that say a path is not there; any other error status is the server failing."""


def hidden_failure(exc: FileNotFoundError) -> RemoteAnswered | None:
    """The server failure behind a FileNotFoundError, or None when the path is really absent. fsspec's
    HTTP file system raises FileNotFoundError for every failed request (a 500 as well as a 404), with
    the response error as its cause."""
    return http_failure(exc.__cause__)


def http_failure(error: BaseException | None) -> RemoteAnswered | None:
    """An HTTP client's response error (it carries `status`) as the server's failure; None for
    another error or a status that says the path is absent."""
    status = getattr(error, "status", None)
    if not isinstance(status, int) or status in ABSENT_STATUSES:
        return None
    reason = getattr(error, "message", "") or ""
    return RemoteAnswered(f"HTTP {status} {reason}".strip())


@dataclass
class Stats:
    records_fetched: int = 0
    objects_fetched: int = 0
    bytes_fetched: int = 0
    records_pushed: int = 0
    objects_pushed: int = 0
    bytes_pushed: int = 0
    remote_calls: int = 0
    """File system operations sent to the remote (each listing, lookup, transfer): what a run cost
    the remote, whatever its latency."""

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


def record_json(record: Record, trust: Trust) -> bytes:
    """The record as the remote holds it, signed by this machine (reconciler.trust.signing)."""
    data = {
        "format": FORMAT,
        "key": record.key,
        "stage": record.stage,
        "key_inputs": record.key_inputs,
        "artifacts": record.artifacts,
        "report": record.report,
        "output_digest": record.output_digest,
        "note": record.note,
    }
    return keys.canonical(trust.sign_record(data)).encode()


def parse_record(raw: bytes, key: str, trust: Trust) -> Record:
    """A record read from the remote, verified against the key it was asked for and signed by a key
    trusted here: anyone who can write the remote can recompute every hash, not sign."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Corrupt(f"record {key[:12]} is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise Corrupt(f"record {key[:12]} has an unknown format")
    if data.get("key") != key or keys.digest(data.get("key_inputs")) != key:
        raise Corrupt(f"record {key[:12]}: its key inputs do not hash to its key")
    artifacts, report = data.get("artifacts"), data.get("report")
    if not isinstance(artifacts, dict) or not isinstance(report, dict):
        raise Corrupt(f"record {key[:12]}: malformed artifacts or report")
    for name, meta in artifacts.items():
        ok = isinstance(meta, dict) and isinstance(meta.get("digest"), str) and _HEX64.match(meta["digest"])
        file = meta.get("file") if isinstance(meta, dict) else None
        safe_file = (
            isinstance(file, str) and file not in ("", ".", "..") and "/" not in file and "\0" not in file
        )
        if not ok or not safe_file or not isinstance(meta.get("size"), int):
            raise Corrupt(f"record {key[:12]}: malformed artifact {name!r}")
    digests = {name: meta["digest"] for name, meta in artifacts.items()}
    if data.get("output_digest") != keys.output_digest(digests, report):
        raise Corrupt(f"record {key[:12]}: its output digest does not match its artifacts and report")
    untrusted = trust.remote_problem(data)
    if untrusted is not None:
        raise Corrupt(f"record {key[:12]}: {untrusted}")
    note = data.get("note")
    return Record(
        key,
        str(data.get("stage")),
        data["key_inputs"],
        artifacts,
        report,
        data["output_digest"],
        str(note or ""),
    )


TIMEOUT_S = float(os.environ.get("NPUCTL_REMOTE_TIMEOUT_S", "120"))
"""Longest wait for one remote operation: a remote that stops answering (a dead peer whose connection
was never closed, a hung mount) is dropped like one that refuses."""


class _Deadlines:
    """Remote calls with a deadline, run one at a time on one daemon thread that serves them all (a
    thread per call cost more than a local file system's call). A call past its deadline raises
    TimeoutError and its thread is abandoned: a hung file system call cannot be interrupted, and the
    next call gets a thread of its own. Daemon, so an abandoned call never holds up the exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] | None = None

    def _serve(self, jobs: queue.SimpleQueue[Any]) -> None:
        while True:
            fn, args, kwargs, box, done = jobs.get()
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc
            done.set()

    def call(self, seconds: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, or TimeoutError after `seconds`."""
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(self._jobs,), name="npuctl-remote", daemon=True
            ).start()
        box: dict[str, Any] = {}
        done = threading.Event()
        self._jobs.put((fn, args, kwargs, box, done))
        if not done.wait(seconds):
            self._jobs = None
            raise TimeoutError(f"no answer in {seconds:.0f} s")
        if "error" in box:
            raise box["error"]
        return box.get("value")


class _Timed:
    """A file system whose every method call has a deadline, counted in `stats.remote_calls`."""

    def __init__(self, fs: Any, seconds: float, stats: Stats, deadlines: _Deadlines) -> None:
        self._fs, self._seconds, self._stats, self._deadlines = fs, seconds, stats, deadlines

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._fs, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._stats.remote_calls += 1
            return self._deadlines.call(self._seconds, method, *args, **kwargs)

        return call


@dataclass
class Remote:
    config: RemoteConfig
    warn: Callable[[str], None]
    timeout_s: float = TIMEOUT_S
    stats: Stats = field(default_factory=Stats)
    down: str | None = None
    """Why the remote was turned off for this run (None while it works)."""
    _fs: Any = None
    _root: str = ""
    _missing: set[str] = field(default_factory=set)
    _bad: set[str] = field(default_factory=set)
    """Remote paths found corrupt in this run: a push replaces them."""
    broken: set[str] = field(default_factory=set)
    """Keys whose remote copy (record or artifacts) did not verify in this run."""
    _made: set[str] = field(default_factory=set)
    """Remote folders made in this run."""

    @property
    def url(self) -> str:
        return self.config.url

    # plumbing ---------------------------------------------------------------------------------
    def _open(self) -> tuple[Any, str]:
        if self._fs is None:
            from fsspec.core import url_to_fs

            options = dict(self.config.options)
            if self.config.scheme in ("s3", "s3a"):  # fail fast when the endpoint is gone
                retry = {"connect_timeout": 5, "read_timeout": 30, "retries": {"max_attempts": 2}}
                options.setdefault("config_kwargs", retry)
            if self.config.scheme in ("sftp", "ssh"):
                options.setdefault("timeout", 30)
                options.setdefault("keepalive_interval", 15)  # a silent peer is noticed
            url = self.config.url
            if self.config.scheme == "ssh":
                # an alias of sftp://. sshfs serves both, but fsspec names the class's configuration
                # key after whichever scheme was asked first in the process, so FSSPEC_SFTP would
                # not apply to an ssh:// URL: one scheme, one configuration key
                url = "sftp" + url[len("ssh") :]
            deadlines = _Deadlines()
            fs, root = deadlines.call(self.timeout_s, url_to_fs, url, **options)
            self._fs = _Timed(fs, self.timeout_s, self.stats, deadlines)
            self._root = str(root).rstrip("/")
        return self._fs, self._root

    def _path(self, *parts: str) -> str:
        _, root = self._open()
        return "/".join([root, *parts]) if root else "/".join(parts)

    def record_path(self, key: str) -> str:
        return self._path("records", f"{key}.json")

    def object_path(self, digest: str) -> str:
        return self._path("objects", digest[:2], digest[2:])

    def _fail(self, what: str, exc: BaseException) -> None:
        """A failure of the remote itself: warn once, stop using it for the rest of the run."""
        exc = http_failure(exc) or exc  # a read that raises the response error itself (cat_file)
        message = str(exc).splitlines()[0] if str(exc) else ""
        self.down = f"{type(exc).__name__}: {message}"[:300]
        self.warn(f"remote {self.url}: {what} failed ({self.down}); continuing without the remote")

    def _corrupt(self, path: str, exc: Corrupt) -> None:
        self._bad.add(path)
        self.warn(f"remote {self.url}: {exc}: ignored, the stage is built here")

    def _put(self, local: Path, path: str) -> None:
        """Uploads `local` to `path`: in one PUT on an object store, else to `tmp/` and renamed into
        place (an upload that did not move is removed)."""
        fs, _ = self._open()
        if self.config.scheme in _OBJECT_STORES:
            fs.put_file(str(local), path)
            return
        tmp = self._path("tmp", f"{uuid.uuid4().hex}.part")
        self._makedirs(fs, tmp.rsplit("/", 1)[0])
        self._makedirs(fs, path.rsplit("/", 1)[0])
        fs.put_file(str(local), tmp)
        moved = False
        try:
            fs.mv(tmp, path)
            moved = True
        finally:
            if not moved and fs.exists(tmp):
                fs.rm_file(tmp)

    def _makedirs(self, fs: Any, folder: str) -> None:
        """Makes a remote folder once a run: a folder is made before the first upload into it, not
        before each (every call is a round trip)."""
        if folder not in self._made:
            fs.makedirs(folder, exist_ok=True)
            self._made.add(folder)

    # reading -------------------------------------------------------------------------------------
    def record(self, key: str, trust: Trust) -> Record | None:
        """The verified record of `key`, or None (a miss, corrupt, or the remote is down)."""
        if self.down is not None or key in self._missing:
            return None
        path = ""
        try:
            fs, _ = self._open()
            path = self.record_path(key)
            raw = fs.cat_file(path, start=0, end=MAX_RECORD_BYTES + 1)  # one call, bounded
        except FileNotFoundError as exc:
            failure = hidden_failure(exc)
            if failure is not None:
                self._fail(f"reading record {key[:12]}", failure)
                return None
            self._missing.add(key)
            return None
        except Exception as exc:  # noqa: BLE001 - any failure of a remote file system is a warning
            self._fail(f"reading record {key[:12]}", exc)
            return None
        if len(raw) > MAX_RECORD_BYTES:
            self._corrupt(path, Corrupt(f"record {key[:12]} exceeds {MAX_RECORD_BYTES} bytes"))
            self.miss(key, broken=True)
            return None
        try:
            record = parse_record(raw, key, trust)
        except Corrupt as exc:
            self._corrupt(path, exc)
            self.miss(key, broken=True)
            return None
        self.stats.records_fetched += 1
        return record

    def fetch_object(self, digest: str, size: int, store: Store, tmpdir: Path) -> bool:
        """Downloads one artifact into the store, verified by digest and size; False on any failure."""
        if self.down is not None:
            return False
        path = self.object_path(digest)
        tmpdir.mkdir(parents=True, exist_ok=True)
        local = tmpdir / f"remote-{uuid.uuid4().hex}"
        try:
            fs, _ = self._open()
            remote_size = fs.info(path).get("size")
            if remote_size is None or remote_size == size:  # a truncated copy is not even fetched
                fs.get_file(path, str(local))
        except FileNotFoundError as exc:
            local.unlink(missing_ok=True)
            failure = hidden_failure(exc)
            if failure is not None:
                self._fail(f"downloading object {digest[:12]}", failure)
                return False
            self.warn(f"remote {self.url}: object {digest[:12]} is missing (its record is there): built here")
            return False
        except Exception as exc:  # noqa: BLE001 - any failure of a remote file system is a warning
            local.unlink(missing_ok=True)
            self._fail(f"downloading object {digest[:12]}", exc)
            return False
        received = local.stat().st_size if local.exists() else int(remote_size or 0)
        actual = sha256_file(local) if received == size and local.exists() else ""
        if received != size or actual != digest:
            local.unlink(missing_ok=True)
            why = f"{received} bytes, {size} recorded" if received != size else f"sha256 {actual[:12]}"
            self._corrupt(path, Corrupt(f"object {digest[:12]} does not verify ({why})"))
            return False
        store.put(local, actual)
        self.stats.objects_fetched += 1
        self.stats.bytes_fetched += received
        return True

    # writing -------------------------------------------------------------------------------------
    def push(self, record: Record, store: Store, tmpdir: Path, trust: Trust) -> bool:
        """Artifacts first, then the record; what the remote already holds (verified or not known bad)
        is not sent again. False when nothing could be pushed (read-only, down, or a failure)."""
        if self.down is not None or not self.config.writable:
            return False
        try:
            fs, _ = self._open()
            for meta in sorted(record.artifacts.values(), key=lambda m: str(m["digest"])):
                path = self.object_path(meta["digest"])
                if path in self._bad or not fs.exists(path):
                    self._put(store.path(meta["digest"]), path)
                    self._bad.discard(path)
                    self.stats.objects_pushed += 1
                    self.stats.bytes_pushed += int(meta["size"])
            path = self.record_path(record.key)
            if path in self._bad or not fs.exists(path):
                tmpdir.mkdir(parents=True, exist_ok=True)
                local = tmpdir / f"record-{uuid.uuid4().hex}.json"
                local.write_bytes(record_json(record, trust))
                try:
                    self._put(local, path)
                finally:
                    local.unlink(missing_ok=True)
                self._bad.discard(path)
                self.stats.records_pushed += 1
        except Exception as exc:  # noqa: BLE001 - any failure of a remote file system is a warning
            self._fail(f"pushing record {record.key[:12]}", exc)
            return False
        self._missing.discard(record.key)
        self.broken.discard(record.key)
        return True

    def miss(self, key: str, broken: bool = False) -> None:
        """Treat `key` as absent for the rest of the run (its artifacts did not come down whole);
        `broken`: because the remote's copy is bad, not because the remote went away."""
        self._missing.add(key)
        if broken:
            self.broken.add(key)

    def record_keys(self) -> set[str]:
        """The keys of every record the remote holds, in one listing (empty when the remote is down
        or holds none yet); a record found corrupt in this run is left out, so a push replaces it."""
        keys = set()
        for name in self._listing("records", lambda fs: fs.ls(self._path("records"), detail=False)):
            base = str(name).rstrip("/").rsplit("/", 1)[-1]
            key = base[: -len(".json")] if base.endswith(".json") else ""
            if _HEX64.match(key) and self.record_path(key) not in self._bad:
                keys.add(key)
        return keys

    def _listing(self, what: str, list_names: Callable[[Any], list[Any]]) -> list[Any]:
        """The names `list_names(fs)` gives; none when the remote is down, holds no `what` folder
        yet, or fails the listing (a warning, as every remote failure is)."""
        if self.down is not None:
            return []
        try:
            fs, _ = self._open()
            return list(list_names(fs))
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001 - any failure of a remote file system is a warning
            self._fail(f"listing {what}", exc)
            return []

    def object_digests(self) -> set[str]:
        """The digest of every object the remote holds, in one recursive listing (empty when the
        remote is down or holds none yet); an object found corrupt in this run is left out."""
        digests = set()
        for name in self._listing("objects", lambda fs: fs.find(self._path("objects"))):
            parts = str(name).rstrip("/").rsplit("/", 2)
            digest = "".join(parts[-2:]) if len(parts) == 3 else ""
            if _HEX64.match(digest) and self.object_path(digest) not in self._bad:
                digests.add(digest)
        return digests

    def has_record(self, key: str) -> bool:
        if self.down is not None:
            return False
        try:
            fs, _ = self._open()
            if self.config.scheme in READ_ONLY:  # its `exists` is False on any failure: ask `info`
                fs.info(self.record_path(key))
                return True
            return bool(fs.exists(self.record_path(key)))
        except FileNotFoundError as exc:
            failure = hidden_failure(exc)
            if failure is not None:
                self._fail(f"looking up record {key[:12]}", failure)
            return False
        except Exception as exc:  # noqa: BLE001 - any failure of a remote file system is a warning
            self._fail(f"looking up record {key[:12]}", exc)
            return False


def pid_tmp(base: Path) -> Path:
    return base / f"remote-{os.getpid()}"
