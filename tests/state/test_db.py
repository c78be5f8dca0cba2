from __future__ import annotations

from pathlib import Path

from reconciler.state.db import Database, Failure, Record, stored_identity


def _record(key: str) -> Record:
    return Record(
        key,
        "import",
        {"fields": {"a": 1}},
        {"model": {"digest": "d" * 64, "file": "m.onnx", "size": 3}},
        {"x": 1},
        "o" * 64,
        "",
    )


def test_records_round_trip_and_survive_reopen(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    db.put_record(_record("k1"))
    db.close()
    again = Database(tmp_path / "state.db")
    assert again.record("k1") == _record("k1")
    assert again.record("missing") is None


def test_wal_mode(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_record_clears_the_terminal_failure_of_its_key(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    db.put_failure(Failure("k1", "import", "bad model", "/log"))
    assert db.failure("k1") == Failure("k1", "import", "bad model", "/log")
    db.put_record(_record("k1"))
    assert db.failure("k1") is None


def test_ledger_keeps_every_attempt_in_order(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    db.log_attempt("s", "default", "import", "k", "failed", "boom", "/log")
    db.log_attempt("s", "default", "import", "k", "built")
    actions = [e["action"] for e in db.ledger("s")]
    assert actions == ["failed", "built"]


def test_heads(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    db.set_head("s", "default", "import", "k1")
    db.set_head("s", "default", "import", "k2")
    assert db.head("s", "default", "import") == "k2"
    assert db.head_keys() == {"k2"}


def test_the_identity_moves_when_a_record_is_replaced_or_removed_not_when_one_is_added(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "state.db")
    first = db.identity()
    db.put_record(_record("k1"))
    db.put_record(_record("k2"))
    assert db.identity() == first  # answers drawn from other records stand
    db.put_record(_record("k1"))
    replaced = db.identity()
    assert replaced != first
    db.delete_records(["k2"])
    moved = db.identity()
    assert moved not in (first, replaced)
    db.close()
    assert stored_identity(tmp_path / "state.db") == moved  # read as a file, nothing written
    (tmp_path / "state.db").unlink()
    for extra in ("-wal", "-shm"):
        (tmp_path / f"state.db{extra}").unlink(missing_ok=True)
    again = Database(tmp_path / "state.db")
    assert again.identity().split(":")[0] != first.split(":")[0]  # a new database, a new id
    again.close()
