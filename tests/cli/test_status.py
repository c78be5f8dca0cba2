"""`npuctl status` piped: the plain columns print what the rich table prints there, line for line."""

from __future__ import annotations

from typing import Any

import pytest
from rich.table import Table

from reconciler.cli import status
from reconciler.output import console


def _row(name: str, reason: str, fps: dict[str, float] | None) -> dict[str, Any]:
    return {
        "name": name,
        "target": "cpu",
        "status": "Healthy",
        "sync": "Synced",
        "health": "Healthy",
        "slo_passed": 1,
        "slo_total": 1 if fps else 0,
        "throughput_fps": fps,
        "reason": reason,
    }


def test_piped_status_prints_the_rich_tables_lines(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [_row("digits-0000", "", {"default": 438.9}), _row("a-longer-name", "lock file out of date", None)]
    table = Table(box=None, header_style="bold")
    for column in status.COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        met = f"{row['slo_passed']}/{row['slo_total']}" if row["slo_total"] else "—"
        fps = ", ".join(f"{v:.0f}" for v in (row["throughput_fps"] or {}).values()) or "—"
        table.add_row(
            row["name"], row["target"], row["status"], row["sync"], row["health"], met, fps, row["reason"]
        )
    console().print(table)
    expected = capsys.readouterr().out

    status._print_table(rows)

    assert capsys.readouterr().out == expected
