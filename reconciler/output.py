"""What every command writes through, below the CLI: the terminal console and the JSON envelope of a
command's results (a contract: `format_version` changes only when a reader must change).

The CLI renders results with these, and so do the renderers of the other packages (gitops, audit):
they live here so that nothing below the CLI imports it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from reconciler.engine.results import SpecResult

FORMAT_VERSION = 1


def to_json(results: list[SpecResult], command: str) -> str:
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

    import click
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()

    class Piped(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            with self.capture() as captured:
                super().print(*objects, **kwargs)
            click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))

    return Piped(width=200, no_color=True, highlight=False)
