"""Gathering the measurements verify judges: the placement estimate, then evaluate's measurements.

Later stages win, so a measured latency replaces the roofline estimate; the artifact size is read off
the store when no runner reported it, since it is exact wherever it is read.
"""

from __future__ import annotations

from typing import Any

from reconciler.state.db import Record

SOURCES = ("check", "rewrite", "evaluate")


def collect(records: dict[str, Record]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for stage in SOURCES:
        record = records.get(stage)
        if record is not None:
            merged.update(record.report.get("measurements") or {})
    compiled = records.get("compile")
    if "size_mb" not in merged and compiled is not None and compiled.artifacts:
        size = sum(int(a["size"]) for a in compiled.artifacts.values())
        merged["size_mb"] = {
            "value": round(size / 1e6, 6),
            "evidence": "measured:host",
            "detail": "compiled artifact bytes",
        }
    return dict(sorted(merged.items()))
