"""The words results are reported in: SLO verdicts and measurement evidence, each with how it is shown.

A verdict word is what lock files and `--json` record (`"verdict": "met on estimate"`); its mark (an emoji,
for Markdown) and its tone (a colour, for terminals and the HTML page) are defined beside it, so every
renderer shows one verdict the same way and the schemas list exactly these words. An evidence text starts
with its kind (`measured:device`, `measured:host`, `estimated`, `not measured`) and may go on naming who
or what measured (`measured:host simulator`, `estimated: vela`); the text is recorded as written, and
`Evidence.parse` reads its kind.

They live below the reconciler because a backend's measurement may already carry a verdict (an estimate
that could not bound the work is `unknown`), and backends never import the reconciler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

NODES_THAT_RUN = "nodes that run"
"""The one node count a human reads: the graph's nodes that do work at inference, constants and shape
arithmetic folded away (what check places and its coverage counts). The node count of the ONNX file
(constants included) and the runtime's kernel count after fusion measure other things: their stage
reports keep them, and their one-line notes do not repeat them, so a build shows one count."""

UNTRUSTED = "not from a trusted builder"
"""Why a recorded result counts for nothing: its record is unsigned, signed by a key the repository's
trust policy does not name (and not this machine's own), or its signature does not verify. Its
verdicts read `unknown` with this reason, never pass or fail (reconciler.trust)."""


class Tone(Enum):
    """How a word reads: good (green), bad (red and bold: it needs action), or unsure (yellow: nothing
    failed and nothing is proved). Terminals colour a word by its tone; the HTML page names it as a class."""

    GOOD = "green"
    BAD = "red"
    UNSURE = "yellow"

    @property
    def colour(self) -> str:
        return self.value

    @property
    def bold(self) -> bool:
        return self is Tone.BAD

    @property
    def style(self) -> str:
        """The rich style ("bold red")."""
        return f"bold {self.value}" if self.bold else self.value

    @property
    def css(self) -> str:
        """The HTML page's class ("good", "bad", "unsure")."""
        return self.name.lower()


class Verdict(Enum):
    """The outcome of one SLO. Only PASS is a pass and only FAIL and FAIL_ESTIMATED are failures: a
    figure measured on a host CPU for an NPU target, or resting on an assumed clock, is evidence about
    something else, so neither its meeting nor its missing the bound proves or fails the SLO."""

    PASS = ("pass", "✅", Tone.GOOD, True)
    """Met on a measurement of the target."""
    FAIL = ("fail", "❌", Tone.BAD, False)
    """Missed on a measurement of the target."""
    MET_ON_ESTIMATE = ("met on estimate", "🟡", Tone.UNSURE, None)
    """Met only on the cost model's estimate: not proved."""
    FAIL_ESTIMATED = ("fail (estimated)", "❌", Tone.BAD, False)
    """Missed even on the estimate: a failure, as the target cannot do better than its roofline."""
    MET_ON_HOST = ("met on host CPU", "🟡", Tone.UNSURE, None)
    """Met by a CPU runtime timing an NPU target's model (`on_target: false`)."""
    MISSED_ON_HOST = ("missed on host CPU", "🟠", Tone.UNSURE, None)
    """Missed by a CPU runtime timing an NPU target's model: says nothing of the NPU."""
    MET_ON_ASSUMPTION = ("met on an assumption", "🟡", Tone.UNSURE, None)
    """Met on a figure from an assumed clock (`assumed`)."""
    MISSED_ON_ASSUMPTION = ("missed on an assumption", "🟠", Tone.UNSURE, None)
    """Missed on a figure from an assumed clock."""
    UNKNOWN = ("unknown", "⚪", Tone.UNSURE, None)
    """The estimate could not bound the work (uncounted ops): no figure to judge."""
    UNVERIFIED = ("unverified", "⚪", Tone.UNSURE, None)
    """Nothing measured it (no measurement, or a vendor tool that did not run)."""

    word: str
    mark: str
    tone: Tone
    passed: bool | None
    """What the record's `passed` says: True only for a pass on a measurement, False for a failure."""

    def __new__(cls, word: str, mark: str, tone: Tone, passed: bool | None) -> Verdict:
        member = object.__new__(cls)
        member._value_ = word
        member.word, member.mark, member.tone, member.passed = word, mark, tone, passed
        return member

    @property
    def label(self) -> str:
        """Mark and word, as Markdown tables show it ("✅ pass")."""
        return f"{self.mark} {self.word}"

    @property
    def failed(self) -> bool:
        return self.passed is False

    @classmethod
    def of(cls, word: object) -> Verdict | None:
        """The verdict a recorded word names; None for anything else (a plan prediction, no verdict)."""
        return next((v for v in cls if v.word == word), None)


class EvidenceKind(Enum):
    """What an evidence text starts with."""

    DEVICE = "measured:device"
    """Measured on the target's own accelerator (a runner reached over ssh/adb, or the host when it is the
    target)."""
    HOST = "measured:host"
    """Measured on this host (or a host CPU standing in for the target), or on a vendor simulator."""
    ESTIMATED = "estimated"
    """From a model of the hardware (roofline cost model, a vendor's performance model, simulated cycles)."""
    NOT_MEASURED = "not measured"
    """No figure: the tool that would have produced it did not run."""


@dataclass(frozen=True)
class Evidence:
    """A measurement's evidence: its kind and the text as recorded (`str()` gives the text back exactly,
    so lock files keep their bytes). A text naming no known kind has kind None: it counts as measured
    by nothing in particular, never as an estimate."""

    kind: EvidenceKind | None
    text: str

    @classmethod
    def parse(cls, text: object) -> Evidence:
        written = "" if text is None else str(text)
        kind = next((k for k in EvidenceKind if written.startswith(k.value)), None)
        return cls(kind, written)

    @property
    def is_estimate(self) -> bool:
        return self.kind is EvidenceKind.ESTIMATED

    def __str__(self) -> str:
        return self.text


def estimated_by(tool: str) -> str:
    """The evidence text of a figure from a vendor tool's own account of a build ("estimated: vela",
    "estimated: rknn-toolkit2"): its compiler's placement, cycle model or memory plan, not a measurement."""
    return f"{EvidenceKind.ESTIMATED.value}: {tool}"


OP_TABLE = "npuctl's op table"
"""Who placed a node when no vendor tool did: the catalog's op table with its constraint clauses. It serves
before a compile, or where no vendor tool ran; where a tool reported its own placement, the tool wins."""


FLOAT_MEAN = "latency_ms.float_mean"
"""The measurement key of the float model's mean latency, timed by the same harness and settings after
an int8 build's own runs on the host, in alternation with the build (PAIRED_MEAN): the comparison an
int8 build is made for."""
PAIRED_MEAN = "latency_ms.paired_mean"
"""The int8 build's mean latency in that alternation with its float model: what FLOAT_MEAN is compared
with (the build's own `latency_ms.*` are its own timing, taken first in a fresh process)."""


def slower_than_float(measurements: Mapping[str, Any]) -> str | None:
    """The sentence saying an int8 build's mean latency is above its float model's, timed in alternation
    (PAIRED_MEAN; the build's own mean where a record has none), or None when it is not (or no float
    timing was recorded): quantizing is meant to make a model faster, and a build that is slower says so
    wherever its latency is shown."""
    built = measurements.get(PAIRED_MEAN) or measurements.get("latency_ms.mean")
    source = measurements.get(FLOAT_MEAN)
    if built is None or source is None or float(built["value"]) <= float(source["value"]):
        return None
    return (
        f"the int8 build is slower than the float model on this host: mean {float(built['value']):.4f} ms "
        f"vs {float(source['value']):.4f} ms float ({source.get('evidence', 'measured:host')})"
    )
