"""state.db: stage records, the file-hash cache, heads, terminal failures and the ledger of attempts.

SQLite in WAL mode: readers never block the writer, and a killed process leaves the last committed
transaction intact. A record is inserted only after its artifacts are durably in the store.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.state.statcache import Stat

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    stage TEXT NOT NULL,
    key_inputs TEXT NOT NULL,
    artifacts TEXT NOT NULL,
    report TEXT NOT NULL,
    output_digest TEXT NOT NULL,
    note TEXT NOT NULL,
    created_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS heads (
    spec TEXT NOT NULL,
    variant TEXT NOT NULL,
    stage TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (spec, variant, stage)
);
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    stage TEXT NOT NULL,
    message TEXT NOT NULL,
    log TEXT NOT NULL,
    created_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS file_digests (
    path TEXT PRIMARY KEY,
    ino INTEGER NOT NULL,
    dev INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    digest TEXT NOT NULL
);
-- an older database's digests, keyed without device and ctime: never trusted, so dropped
DROP TABLE IF EXISTS file_hashes;
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ns INTEGER NOT NULL,
    spec TEXT NOT NULL,
    variant TEXT NOT NULL,
    stage TEXT NOT NULL,
    key TEXT NOT NULL,
    action TEXT NOT NULL,
    message TEXT NOT NULL,
    log TEXT NOT NULL,
    duration_ms REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_spec ON ledger (spec, time_ns);
CREATE TABLE IF NOT EXISTS remote_records (
    remote TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (remote, key)
);
"""


_SCHEMA_NAMES = frozenset(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", _SCHEMA))


@dataclass(frozen=True)
class Record:
    key: str
    stage: str
    key_inputs: dict[str, Any]
    artifacts: dict[str, dict[str, Any]]
    """name -> {"digest", "file" (the file name the stage gave it), "size"}"""
    report: dict[str, Any]
    output_digest: str
    note: str


@dataclass(frozen=True)
class Failure:
    key: str
    stage: str
    message: str
    log: str


def _digest_row(row: Any) -> tuple[Stat, str]:
    """(stat key, digest) of a file_digests row's last six columns."""
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])), str(row[5])


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


_IDENTITY = "SELECT key, value FROM meta WHERE key IN ('id', 'generation')"


def _identity(rows: dict[str, str]) -> str | None:
    return f"{rows['id']}:{rows.get('generation', '0')}" if "id" in rows else None


def stored_identity(path: Path) -> str | None:
    """`Database.identity` of the database at `path`, read as an immutable file: no lock, no shared
    memory file, nothing written (the no-op replay checks it before anything else is loaded). Only
    while the write-ahead log holds no frames does the file alone say what the database holds; None
    otherwise, or when it has no identity or cannot be read."""
    try:
        if os.stat(f"{path}-wal").st_size:
            return None
    except OSError:
        pass  # no log: every committed transaction is in the file
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            return _identity(dict(conn.execute(_IDENTITY)))
        finally:
            conn.close()
    except sqlite3.Error:
        return None


class Database:
    def __init__(self, path: Path) -> None:
        self._parsed: dict[str, tuple[tuple[Any, ...], Record]] = {}
        """key -> (its row, the Record parsed from it): a plan of N specs sharing stages reads the
        same rows N times; the row is still read each time, only its JSON is not parsed again."""
        for attempt in range(100):
            try:
                self._open(path)
                return
            except sqlite3.OperationalError as exc:
                # Switching a new database to WAL needs a moment alone with it, and SQLite answers
                # "locked" at once, without its busy handler, when another process is opening it too.
                if "locked" not in str(exc) or attempt == 99:
                    raise OSError(errno.EIO, f"cannot open the state database: {exc}", str(path)) from exc
                self._close_quietly()
                time.sleep(0.05)
            except sqlite3.Error as exc:  # a full or read-only disk: name the file
                raise OSError(errno.EIO, f"cannot open the state database: {exc}", str(path)) from exc

    def _close_quietly(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=60000")
        self._ensure_schema()

    @classmethod
    def copy_of(cls, path: Path) -> Database:
        """A private in-memory database holding what `path` holds (nothing when it does not exist),
        which is only read: for a checkout whose state folder cannot be written (a read-only mount),
        where plan and status still answer, and whatever they cache is forgotten at exit."""
        db = cls.__new__(cls)
        db._parsed = {}
        db.path = path
        db.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        if path.is_file():
            try:
                source = sqlite3.connect(f"{path.absolute().as_uri()}?immutable=1", uri=True)
                try:
                    source.backup(db.conn)
                finally:
                    source.close()
            except sqlite3.Error as exc:
                raise OSError(errno.EIO, f"cannot read the state database: {exc}", str(path)) from exc
        db._ensure_schema()
        return db

    def _ensure_schema(self) -> None:
        if self._schema_present():
            return  # a read: opening an existing database takes no write lock
        with self.transaction():
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            self.conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )

    def _schema_present(self) -> bool:
        """Every table and index of _SCHEMA exists and the version is recorded (checked by reading)."""
        names = {row[0] for row in self.conn.execute("SELECT name FROM sqlite_master")}
        if not names >= _SCHEMA_NAMES:
            return False
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return row is not None and row[0] == str(SCHEMA_VERSION)

    def close(self) -> None:
        self.conn.close()

    def integrity(self) -> str:
        """SQLite's own check of the file: "ok", or its first complaint."""
        row = self.conn.execute("PRAGMA integrity_check").fetchone()
        return str(row[0]) if row else "no answer"

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # what a remote holds, as far as this machine saw ---------------------------------------------------
    def remote_records(self, remote: str) -> set[str]:
        """The keys this machine pushed to, fetched from or saw listed at `remote` (a
        RemoteConfig.identity): what a push may take as there without asking."""
        rows = self.conn.execute("SELECT key FROM remote_records WHERE remote = ?", (remote,))
        return {row[0] for row in rows}

    def saw_on_remote(self, remote: str, present: Iterable[str], gone: Iterable[str] = ()) -> None:
        """Records what the remote was seen to hold: `present` keys are there, `gone` keys (listed as
        known here, absent from a fresh listing) are not."""
        with self.transaction() as conn:
            conn.executemany(
                "DELETE FROM remote_records WHERE remote = ? AND key = ?", [(remote, k) for k in gone]
            )
            conn.executemany(
                "INSERT OR IGNORE INTO remote_records VALUES (?, ?)", [(remote, k) for k in present]
            )

    # records -------------------------------------------------------------------------------------
    def record(self, key: str) -> Record | None:
        row = self.conn.execute(
            "SELECT key, stage, key_inputs, artifacts, report, output_digest, note FROM records WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        known = self._parsed.get(key)
        if known is not None and known[0] == row:
            return known[1]
        record = Record(
            row[0], row[1], json.loads(row[2]), json.loads(row[3]), json.loads(row[4]), row[5], row[6]
        )
        self._parsed[key] = (tuple(row), record)
        return record

    def identity(self) -> str:
        """This database's id and how many times a record in it was replaced or removed: what a
        cached answer drawn from its records stands on (reconciler.engine.settled). A record only
        added changes no answer drawn from the others, so it leaves the identity as it was; a new
        database (a deleted state.db made again) gets a new id."""
        found = _identity(dict(self.conn.execute(_IDENTITY)))
        if found is None:
            with self.transaction() as conn:
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('id', ?)", (uuid.uuid4().hex,))
            found = _identity(dict(self.conn.execute(_IDENTITY)))
        assert found is not None
        return found

    @staticmethod
    def _moved(conn: sqlite3.Connection) -> None:
        """A record was replaced or removed: answers drawn from the records may differ (`identity`)."""
        conn.execute(
            "INSERT INTO meta VALUES ('generation', '1') "
            "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def put_record(self, record: Record) -> None:
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM records WHERE key = ?", (record.key,)).fetchone():
                self._moved(conn)
            conn.execute(
                "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.key,
                    record.stage,
                    _dumps(record.key_inputs),
                    _dumps(record.artifacts),
                    _dumps(record.report),
                    record.output_digest,
                    record.note,
                    time.time_ns(),
                ),
            )
            conn.execute("DELETE FROM failures WHERE key = ?", (record.key,))

    def delete_records(self, keys: list[str]) -> None:
        with self.transaction() as conn:
            conn.executemany("DELETE FROM records WHERE key = ?", [(k,) for k in keys])
            self._moved(conn)

    def all_records(self) -> Iterator[Record]:
        for row in self.conn.execute(
            "SELECT key, stage, key_inputs, artifacts, report, output_digest, note FROM records"
        ):
            yield Record(
                row[0], row[1], json.loads(row[2]), json.loads(row[3]), json.loads(row[4]), row[5], row[6]
            )

    # heads: the last key built or reused per spec, variant and stage (for explain and status) -----
    def head(self, spec: str, variant: str, stage: str) -> str | None:
        row = self.conn.execute(
            "SELECT key FROM heads WHERE spec = ? AND variant = ? AND stage = ?", (spec, variant, stage)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_head(self, spec: str, variant: str, stage: str, key: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO heads VALUES (?, ?, ?, ?)", (spec, variant, stage, key))

    def head_keys(self) -> set[str]:
        return {str(row[0]) for row in self.conn.execute("SELECT key FROM heads")}

    # terminal failures: not retried until the stage's key changes ---------------------------------
    def failure(self, key: str) -> Failure | None:
        row = self.conn.execute(
            "SELECT key, stage, message, log FROM failures WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else Failure(*row)

    def put_failure(self, failure: Failure) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO failures VALUES (?, ?, ?, ?, ?)",
                (failure.key, failure.stage, failure.message, failure.log, time.time_ns()),
            )

    # file-hash cache ------------------------------------------------------------------------------
    # digests by absolute path, with the stat key they were computed at (reconciler.state.statcache)
    def cached_hash(self, path: str) -> tuple[Stat, str] | None:
        row = self.conn.execute(
            "SELECT ino, dev, size, mtime_ns, ctime_ns, digest FROM file_digests WHERE path = ?", (path,)
        ).fetchone()
        return None if row is None else _digest_row(row)

    def cached_hashes_under(self, prefix: str) -> dict[str, tuple[Stat, str]]:
        """Every cached row whose path starts with `prefix` (a folder path ending in a separator)."""
        rows = self.conn.execute(
            "SELECT path, ino, dev, size, mtime_ns, ctime_ns, digest FROM file_digests "
            "WHERE path >= ? AND path < ?",
            (prefix, prefix + "\U0010ffff"),
        )
        return {str(r[0]): _digest_row(r[1:]) for r in rows}

    def forget_hash(self, path: str) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM file_digests WHERE path = ?", (path,))

    def put_hashes(self, rows: list[tuple[str, Stat, str]]) -> None:
        if rows:
            with self.transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO file_digests VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(path, *stat, digest) for path, stat, digest in rows],
                )

    # ledger ---------------------------------------------------------------------------------------
    def log_attempt(
        self,
        spec: str,
        variant: str,
        stage: str,
        key: str,
        action: str,
        message: str = "",
        log: str = "",
        duration_ms: float = 0.0,
        data: dict[str, Any] | None = None,
    ) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO ledger (time_ns, spec, variant, stage, key, action, message, log, duration_ms, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    time.time_ns(),
                    spec,
                    variant,
                    stage,
                    key,
                    action,
                    message,
                    log,
                    duration_ms,
                    _dumps(data or {}),
                ),
            )

    def ledger(self, spec: str | None = None) -> list[dict[str, Any]]:
        query = (
            "SELECT time_ns, spec, variant, stage, key, action, message, log, duration_ms, data FROM ledger"
        )
        args: tuple[Any, ...] = ()
        if spec is not None:
            query += " WHERE spec = ?"
            args = (spec,)
        rows = self.conn.execute(query + " ORDER BY id", args).fetchall()
        names = (
            "time_ns",
            "spec",
            "variant",
            "stage",
            "key",
            "action",
            "message",
            "log",
            "duration_ms",
            "data",
        )
        out = []
        for row in rows:
            entry = dict(zip(names, row, strict=True))
            entry["data"] = json.loads(entry["data"])
            out.append(entry)
        return out
