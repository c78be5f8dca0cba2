"""One status line per spec: a rich Live table on a terminal, plain or JSON lines otherwise.

Plain and JSON outputs print a line only when a spec's state or detail changes, so logs stay readable
and a test (or a script) can follow the watcher by reading lines.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from reconciler.engine import health

STYLE = {
    **{word: tone.colour for word, tone in health.TONE.items()},
    "building": "cyan",
    "queued": "cyan",
    "cancelled": "magenta",
    "invalid": "red",
    "stalled": "red",
    "failed": "red",
    "removed": "dim",
}


@dataclass
class Line:
    spec: str
    state: str
    detail: str
    since: float = field(default_factory=time.monotonic)


class Board:
    """Prints nothing; subclasses decide how lines look. `update` and `message` are the whole API."""

    def __init__(self) -> None:
        self.lines: dict[str, Line] = {}

    def update(self, spec: str, state: str, detail: str = "") -> None:
        current = self.lines.get(spec)
        if current is not None and (current.state, current.detail) == (state, detail):
            return
        self.lines[spec] = Line(spec, state, detail)
        self.changed(self.lines[spec])

    def remove(self, spec: str) -> None:
        """Forget a spec's line (its file was deleted or it was renamed)."""
        self.lines.pop(spec, None)

    def message(self, text: str, **data: Any) -> None:
        """A one-off line (a cancellation, the first line of an error)."""

    def changed(self, line: Line) -> None:
        pass

    def tick(self) -> None:
        """Called every loop iteration (a live display refreshes elapsed times)."""

    def close(self) -> None:
        pass


class PlainBoard(Board):
    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stdout

    def _print(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", file=self.stream, flush=True)

    def changed(self, line: Line) -> None:
        self._print(f"{line.spec}: {line.state}" + (f": {line.detail}" if line.detail else ""))

    def message(self, text: str, **data: Any) -> None:
        self._print(text)


class JsonBoard(Board):
    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stdout

    def _emit(self, data: dict[str, Any]) -> None:
        data = {"time": round(time.time(), 3), **data}
        print(json.dumps(data, sort_keys=True), file=self.stream, flush=True)

    def changed(self, line: Line) -> None:
        self._emit({"event": "status", "spec": line.spec, "state": line.state, "detail": line.detail})

    def message(self, text: str, **data: Any) -> None:
        self._emit({"event": data.pop("event", "message"), "message": text, **data})


class LiveBoard(Board):
    """A rich Live table redrawn in place; messages scroll above it."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()
        self._drawn = 0.0

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, header_style="bold", show_edge=False)
        for column in ("spec", "state", "for", "detail"):
            table.add_column(column, overflow="fold")
        now = time.monotonic()
        for line in sorted(self.lines.values(), key=lambda item: item.spec):
            style = STYLE.get(line.state, "")
            elapsed = f"{now - line.since:.0f}s"
            table.add_row(
                line.spec, f"[{style}]{line.state}[/{style}]" if style else line.state, elapsed, line.detail
            )
        return table

    def changed(self, line: Line) -> None:
        self.live.update(self._table())

    def message(self, text: str, **data: Any) -> None:
        self.live.console.print(f"{time.strftime('%H:%M:%S')} {text}", markup=False, highlight=False)
        self.live.update(self._table())

    def tick(self) -> None:
        if time.monotonic() - self._drawn >= 1.0:
            self._drawn = time.monotonic()
            self.live.update(self._table())

    def close(self) -> None:
        self.live.update(self._table())
        self.live.stop()
