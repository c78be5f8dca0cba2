"""Local applies from the ledger: every distinct set of verdicts `apply` judged, with its stage keys.

An apply whose results were committed (same import key, same verdicts) is not listed again: its time is
attached to the commit's entry (`applied_at`). The others (never committed, or overwritten before a
commit) are entries of their own, with the model identity read off the local stage records.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from reconciler.audit.entries import CANCELLED_STATUS, AuditEntry, toolchains
from reconciler.engine import health
from reconciler.records import judged
from reconciler.state.db import Database, Record
from reconciler.state.lockread import LockedStage


def _time(time_ns: int) -> datetime:
    return datetime.fromtimestamp(time_ns / 1e9, tz=timezone.utc).astimezone()


def _records(db: Database, keys: dict[str, str]) -> dict[str, dict[str, Record]]:
    """variant -> stage -> record, for the keys a verify entry was judged on."""
    out: dict[str, dict[str, Record]] = {}
    for where, key in keys.items():
        variant, _, stage = where.partition("/")
        record = db.record(key) if key else None
        if record is not None:
            out.setdefault(variant, {})[stage] = record
    return out


def _entry(db: Database, row: dict[str, Any], versions: dict[str, str | None]) -> AuditEntry:
    data = row["data"]
    keys: dict[str, str] = data.get("keys") or {}
    records = _records(db, keys)
    default = records.get("default") or next(iter(records.values()), {})
    imported = default.get("import")
    target = next(
        (
            r.key_inputs.get("fields", {}).get("target")
            for r in default.values()
            if "target" in r.key_inputs.get("fields", {})
        ),
        None,
    )
    stages = {
        name: LockedStage(name, r.key, {}, r.note.startswith("identity"), r.key_inputs.get("impl") or {}, {})
        for name, r in default.items()
    }
    import_key = keys.get("default/import")
    return AuditEntry(
        source="ledger",
        label="local apply",
        time=_time(int(row["time_ns"])),
        spec=str(row["spec"]),
        target=str(target or "?"),
        lock_file="",
        status=str(data.get("status", row.get("message", "?"))),
        model_version=versions.get(import_key or ""),
        model_digest=((imported.artifacts.get("model") or {}).get("digest") if imported else None),
        model_file_digest=(imported.key_inputs.get("files", {}).get("model") if imported else None),
        import_key=import_key,
        verdicts=judged.verdicts(data.get("verdicts")),
        toolchains=toolchains(stages),
    )


ATTEMPTS = {"failed": health.FAILED, "cancelled": CANCELLED_STATUS}
"""Ledger actions of attempts that judged nothing, listed as entries of their own."""


def _attempt(row: dict[str, Any]) -> AuditEntry:
    what = row["action"]
    stage = f"{row['stage']} [{row['variant']}]: " if row["stage"] not in ("apply", "*") else ""
    return AuditEntry(
        source="ledger",
        label=f"local {what}",
        time=_time(int(row["time_ns"])),
        spec=str(row["spec"]),
        target="?",
        lock_file="",
        status=ATTEMPTS[what],
        model_version=None,
        model_digest=None,
        model_file_digest=None,
        import_key=None,
        attempt=f"{what}: {stage}{row['message']}"[:300],
    )


def merge(db: Database, entries: list[AuditEntry]) -> list[AuditEntry]:
    """`entries` plus the ledger's applies that match none of them; matched ones annotate the entry.
    Failed and cancelled attempts (a stage that failed, a build watch cancelled) are entries too."""
    versions = {e.import_key: e.model_version for e in entries if e.import_key}
    by_result: dict[tuple[Any, ...], list[AuditEntry]] = {}
    for entry in entries:
        by_result.setdefault(entry.verdict_key(), []).append(entry)
    extra: list[AuditEntry] = []
    for row in db.ledger():
        if row["action"] in ATTEMPTS:
            extra.append(_attempt(row))
            continue
        if row["stage"] != "verify":
            continue
        applied = _entry(db, row, versions)
        matches = by_result.get(applied.verdict_key())
        if matches:
            for entry in matches:
                entry.applied_at.append(applied.time.isoformat(timespec="seconds"))
            if not matches[-1].model_file_digest:
                matches[-1].model_file_digest = applied.model_file_digest
            continue
        extra.append(applied)
    return entries + extra
