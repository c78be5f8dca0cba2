"""Rendering results three ways: JSON (the envelope of reconciler.output), Markdown for PRs, terminal tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import click

from backends.sdk.vocab import UNTRUSTED, Tone, Verdict
from reconciler.cli._ci import Tally, summary_of
from reconciler.engine import health
from reconciler.engine.results import SpecResult
from reconciler.output import action_word, json_envelope, measured_against, spec_json
from reconciler.records.judged import Judged


def verdict_text(v: Judged) -> str:
    """The verdict, with plan's prediction ("pass -> fail"), the carried-over mark, and why a verdict
    on records that do not count is unknown."""
    text = v.predicted or v.verdict
    if v.detail.startswith(UNTRUSTED):
        text += f": {UNTRUSTED}"
    return text + (" (carried over)" if v.carried_over else "")


SLO_COLUMNS = ("SLO", "variant", "measured", "verdict", "evidence")


def _slo_rows(verdicts: list[Judged]) -> list[tuple[str, ...]]:
    return [
        (
            v.name,
            v.variant,
            measured_against(v.name, v.value, v.comparison, v.threshold),
            verdict_text(v),
            v.evidence or "—",
        )
        for v in verdicts
    ]


def fps_text(fps: float) -> str:
    """Frames per second: whole frames from 100 up (11081, not 1.108e+04), three digits below."""
    return f"{fps:.0f}" if fps >= 100 else f"{fps:.3g}"


def throughput_line(r: SpecResult) -> str | None:
    """Frames per second per variant beside the latency it comes from (reconciler.engine.throughput)."""
    if not r.throughput_fps:
        return None
    shown = ", ".join(f"{variant} {fps_text(fps)} FPS" for variant, fps in r.throughput_fps.items())
    return f"throughput (batch x 1000 / mean latency ms): {shown}"


def carried_lines(carried: list[str]) -> list[str]:
    """`variant/stage: why` entries grouped by why: one line per reason, naming its stages."""
    grouped: dict[str, list[str]] = {}
    for entry in carried:
        where, _, why = entry.partition(": ")
        grouped.setdefault(why, []).append(where)
    return [f"carried over, not re-verified here: {', '.join(w)} ({why})" for why, w in grouped.items()]


def headline(r: SpecResult) -> str:
    """`Synced, Healthy`; the status word first when it is not the health (Stalled, Failed)."""
    parts = [r.sync, r.health]
    if r.status not in (r.sync, r.health):
        parts.insert(0, r.status)
    return ", ".join(parts) + (" (carried over)" if r.carried_over else "")


def to_markdown(results: list[SpecResult], command: str) -> str:
    return render(results, "markdown", command)


def _markdown_lines(r: SpecResult) -> list[str]:
    lines = [f"#### `{r.name}` → `{r.target or '?'}`: **{headline(r)}**", ""]
    for error in [*r.errors, *r.lock_problems]:
        lines.append(f"- ❗ `{error}`")
    lines += [f"- ↪ {line}" for line in carried_lines(r.carried_over)]
    if r.stages:
        lines += ["| stage | variant | action | reason |", "|---|---|---|---|"]
        for s in r.stages:
            action = action_word(s.action, s.identity)
            lines.append(f"| {s.name} | {s.variant} | {action} | {s.reason.replace('|', '/')} |")
        lines.append("")
        notes = [f"- `{s.name}`: {s.note}" for s in r.stages if s.action == "built" and s.note]
        lines += [*notes, ""] if notes else []
    if r.slo:
        lines += ["| " + " | ".join(SLO_COLUMNS) + " |", "|" + "---|" * len(SLO_COLUMNS)]
        for v, row in zip(r.slo, _slo_rows(r.slo), strict=True):
            name, variant, measured, verdict, evidence = row
            judged = Verdict.of(v.verdict)
            shown = f"{judged.mark} {verdict}" if judged else verdict
            lines.append(f"| {name} | {variant} | {measured} | {shown} | {evidence} |")
        lines.append("")
    fps = throughput_line(r)
    lines += [fps, ""] if fps else []
    return lines


def columns(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """Plain aligned columns: cheap enough for hundreds of specs, readable in any CI log."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def text_lines(results: list[SpecResult]) -> list[str]:
    return [line for r in results for line in _text_lines(r)]


def _text_lines(r: SpecResult) -> list[str]:
    """One line for a spec that is up to date; its stages and SLOs where something happens or failed."""
    settled = r.stages and all(s.action == "cached" for s in r.stages) and not r.errors
    counts = f" ({len(r.stages)} stages cached)" if settled else ""
    lines = [f"{r.name} -> {r.target or '?'}: {headline(r)}{counts}"]
    lines += [f"  {error}" for error in [*r.errors, *r.lock_problems]]
    lines += [f"  {line}" for line in carried_lines(r.carried_over)]
    if r.stages and not settled:
        rows: list[tuple[str, ...]] = [("stage", "variant", "action", "reason")]
        for s in r.stages:
            log = f" (log: {s.log})" if s.log and s.action == "failed" else ""
            rows.append((s.name, s.variant, action_word(s.action, s.identity), s.reason + log))
        lines += columns(rows)
        lines += [f"  {s.name}: {s.note}" for s in r.stages if s.action == "built" and s.note]
    failing = [v for v in r.slo if v.passed is not True or v.predicted]
    if r.slo and (not settled or failing):
        lines += columns([SLO_COLUMNS, *_slo_rows(r.slo)])
        fps = throughput_line(r)
        lines += [f"  {fps}"] if fps else []
    return lines


_TONES: dict[str, Tone] = {
    **health.TONE,
    **{v.word: v.tone for v in Verdict},
    "carried over": Tone.UNSURE,
}
"""Words coloured on a terminal: the state words, the verdict words, and the carried-over mark."""
_WORDS = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(w) for w in sorted(_TONES, key=len, reverse=True)) + r")(?![\w-])"
)


def colour(line: str) -> str:
    """Verdict and state words coloured (green good, red bad, yellow unproven). Widths are computed on
    the plain text first, and click.echo drops the codes when the output is not a terminal."""

    def paint(match: re.Match[str]) -> str:
        word = match.group(1)
        tone = _TONES[word]
        return click.style(word, fg=tone.colour, bold=tone.bold)

    return _WORDS.sub(paint, line)


def print_text(results: list[SpecResult], command: str, verbose: bool = True) -> None:
    click.echo(render(results, "text", command))


@dataclass(frozen=True)
class Piece:
    """One spec's part of a command's output in one format, and its part of the summary line: the
    output is its pieces joined (`assemble`), so a replayed plan can print the stored pieces of the
    specs it did not read beside the fresh ones, the same bytes as rendering every result."""

    name: str
    text: str
    tally: Tally

    @classmethod
    def of(cls, result: SpecResult, fmt: str) -> Piece:
        if fmt == "json":
            text = spec_json(result)
        elif fmt == "markdown":
            text = "\n".join(_markdown_lines(result))
        else:
            text = "\n".join(colour(line) for line in _text_lines(result))
        return cls(result.name, text, Tally.of(result))


def assemble(pieces: Sequence[Piece], fmt: str, command: str) -> str:
    """The output of `command` made of `pieces`, in order (a JSON envelope, a Markdown document with
    its result line, or text lines)."""
    if fmt == "json":
        return json_envelope([p.text for p in pieces], command)
    if fmt == "markdown":
        result = f"**Result**: {summary_of([p.tally for p in pieces], command)}"
        return "\n".join([f"### npuctl {command}", "", *(p.text for p in pieces), result]) + "\n"
    return "\n".join(p.text for p in pieces)


def render(results: list[SpecResult], fmt: str, command: str) -> str:
    """What `emit` prints (one click.echo, which drops the colour codes off a terminal)."""
    return assemble([Piece.of(r, fmt) for r in results], fmt, command)


def emit(results: list[SpecResult], fmt: str, command: str) -> None:
    click.echo(render(results, fmt, command))
