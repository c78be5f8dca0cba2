"""What every command writes through, below the CLI: the terminal console, the JSON envelope of a
command's results (a contract: `format_version` changes only when a reader must change), and the
words and numbers every human-readable format shares: a number to a few significant digits, an SLO
measured against its bound (`217.3 > 150 ms`), a stage's action, a long text cut to a line.

The CLI renders results with these, and so do the renderers of the other packages (gitops, audit,
report): they live here so that nothing below the CLI imports it, and so one figure reads the same in
a terminal, a pull-request comment and the HTML page.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from reconciler.engine.results import SpecResult

FORMAT_VERSION = 1
DIGITS = 4
"""Significant digits a figure is shown with: a timing's fourth digit is already below its noise."""
NONE = "—"
"""What a missing figure reads as."""
IDENTITY = "identity"
"""What an inactive stage that passes its input through reads as, in place of "build" or "built"."""
_NEGATION = {"<=": ">", ">=": "<", "<": ">=", ">": "<=", "==": "!="}
_UNITS = (("_ms", "ms"), ("_mb", "MB"))
"""An SLO's unit, from the suffix of its first name segment (`latency_ms.p90` -> ms, `size_mb` -> MB)."""


def number(value: float | int | None, digits: int = DIGITS) -> str:
    """A figure to `digits` significant digits (`157.88300950000001` -> `157.9`); an integer, or a
    float too large for its digits to hold the integer part, without a fraction (`12345.6` -> `12346`,
    never `1.235e+04`); `—` for none. Every human-readable format shows numbers through this."""
    if value is None:
        return NONE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (value.is_integer() and abs(value) < 10**15):
        return str(int(value))
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def unit(slo_name: str) -> str:
    """The unit an SLO's figures are in, read from its name; "" for a ratio or a count."""
    head = slo_name.split(".", 1)[0]
    return next((u for suffix, u in _UNITS if head.endswith(suffix)), "")


def measured_against(name: str, value: float | None, comparison: str, threshold: float | None) -> str:
    """An SLO's figure against its bound, as a reader checks it: the value, the relation that holds
    (the SLO's own when met, its negation when missed), the threshold and the unit:
    `217.3 > 150 ms` for a missed `<= 150`, `0.9806 >= 0.95` for a met accuracy (met or missed by
    reconciler.engine.verify's own rule). With no value, the bound alone (`no value (<= 150 ms)`)."""
    from reconciler.engine.verify import meets

    suffix = f" {unit(name)}" if unit(name) else ""
    if value is None or threshold is None:
        return f"no value ({comparison} {number(threshold)}{suffix})"
    relation = (
        comparison if meets(value, comparison, threshold) else _NEGATION.get(comparison, f"not {comparison}")
    )
    return f"{number(value)} {relation} {number(threshold)}{suffix}"


def action_word(action: str, identity: bool) -> str:
    """A stage's action as shown: an identity stage that would build or was built reads as identity
    (it runs nothing: it passes its input through)."""
    return IDENTITY if identity and action in ("build", "built") else action


def shorten(text: str, limit: int = 72) -> str:
    """The first line of `text`, cut to `limit` characters with an ellipsis: a commit subject or a
    value in a table cell never makes a row taller or wider than a line."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def to_json(results: list[SpecResult], command: str) -> str:
    return json_envelope([spec_json(r) for r in results], command)


def spec_json(result: SpecResult) -> str:
    """One spec's entry of the JSON output, as it stands in the envelope's `specs` list (indented)."""
    text = json.dumps(result.to_json(), indent=2, sort_keys=True)
    return "\n".join("    " + line for line in text.splitlines())


def json_envelope(entries: list[str], command: str) -> str:
    """The JSON output around entries made by `spec_json`: the same text as dumping the whole payload
    at once, so a replayed plan can join stored entries without parsing them."""
    payload: dict[str, Any] = {"format_version": FORMAT_VERSION, "command": command, "specs": []}
    head = json.dumps(payload, indent=2, sort_keys=True)
    if not entries:
        return head
    return head.replace('"specs": []', '"specs": [\n' + ",\n".join(entries) + "\n  ]")


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
