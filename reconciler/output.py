"""What the renderers of every command share, below the CLI: the JSON envelope of plan and apply
results (a contract: its format_version changes only with a breaking change) and the rich console.

The CLI, `plan --base` (gitops) and audit all print through these, so piped output looks the same
everywhere and the JSON of `plan --base` is plan's with its comparison added.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from reconciler.engine.results import SpecResult

if TYPE_CHECKING:
    from rich.console import Console

FORMAT_VERSION = 1


def results_json(results: list[SpecResult], command: str) -> str:
    payload: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "command": command,
        "specs": [r.to_json() for r in results],
    }
    return json.dumps(payload, indent=2, sort_keys=True)


def console() -> Console:
    """A rich console; when output is not a terminal, wide enough that reasons are not folded, and with
    no trailing padding (a piped table's lines end where their text ends)."""
    import sys

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()

    class Piped(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            with self.capture() as captured:
                super().print(*objects, **kwargs)
            click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))

    return Piped(width=200, no_color=True, highlight=False)
