"""The CI log's progress: one line per stage that did work, on stderr (a terminal gets progress bars)."""

from __future__ import annotations

import time
from collections import Counter

import click

from reconciler.engine.reporter import Reporter
from reconciler.engine.results import StageResult


class HeartbeatReporter(Reporter):
    """One line per stage that built, failed or was skipped (cached stages stay silent, so a no-op run
    prints nothing), with the spec's progress and the time since the run started."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.totals: dict[str, int] = {}
        self.done: Counter[str] = Counter()

    def spec_started(self, spec: str, total_stages: int) -> None:
        self.totals[spec] = total_stages

    def stage_finished(self, spec: str, result: StageResult) -> None:
        self.done[spec] += 1
        if result.action == "cached":
            return
        took = f" in {result.duration_ms / 1000:.1f} s" if result.duration_ms is not None else ""
        progress = f"{self.done[spec]}/{self.totals.get(spec, '?')}"
        line = f"npuctl: {spec} [{result.variant}] {result.name} {result.action}{took} ({progress} stages, {self._clock()})"
        if result.action == "failed":
            line += f": {result.reason}"
        click.echo(line, err=True)

    def waiting(self, what: str, holder: str) -> None:
        click.echo(f"npuctl: waiting for lock on {what}: held by {holder}", err=True)

    def warning(self, message: str) -> None:
        click.echo(f"npuctl: warning: {message}", err=True)

    def _clock(self) -> str:
        return f"{time.monotonic() - self.started:.1f} s"
