"""Output for CI logs: a closing summary line, and GitHub Actions annotations (`::error file=,line=,col=::`)
when GITHUB_ACTIONS is set. (The heartbeat per stage is reconciler.cli._heartbeat.)

Annotations go to stderr, so `--json` and `--format markdown` on stdout stay machine-clean; the Actions
runner reads workflow commands from both streams.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # validate imports this module and must not load the engine
    from reconciler.engine.results import SpecResult


def summary_line(results: Sequence[SpecResult], command: str, seconds: float) -> str:
    """`apply: 3 specs (2 Synced/Healthy, 1 ...); stages 4 built, 17 cached, 0 failed; 12.3 s`."""
    return f"{summary_counts(results, command)}; {seconds:.1f} s"


@dataclass(frozen=True)
class Tally:
    """What one spec adds to the summary line: its state, its stages' action words, its SLOs' verdict
    words. A replayed plan keeps it per spec (reconciler.cli._replay) to count specs it did not read."""

    status: str
    actions: tuple[str, ...]
    verdicts: tuple[str, ...]

    @classmethod
    def of(cls, result: SpecResult) -> Tally:
        from reconciler.output import action_word

        actions = tuple(action_word(s.action, s.identity) for s in result.stages)
        return cls(result.status, actions, tuple(v.verdict for v in result.slo))


def summary_counts(results: Sequence[SpecResult], command: str) -> str:
    return summary_of([Tally.of(r) for r in results], command)


def summary_of(tallies: Sequence[Tally], command: str) -> str:
    """The summary line without its time: specs by state, stages by action (an idle stage as
    identity), and, when any SLO is set, SLOs by verdict word (`SLOs: 2 pass, 1 unverified`)."""
    states = Counter(t.status for t in tallies)
    actions = Counter(a for t in tallies for a in t.actions)
    verdicts = Counter(v for t in tallies for v in t.verdicts)
    state_text = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    action_text = ", ".join(f"{n} {action}" for action, n in sorted(actions.items())) or "none"
    slo_text = ", ".join(f"{n} {word}" for word, n in sorted(verdicts.items()))
    line = f"{command}: {len(tallies)} spec(s) ({state_text}); stages: {action_text}"
    return line + (f"; SLOs: {slo_text}" if slo_text else "")


def github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(
    level: str, message: str, file: str | None = None, line: int = 0, col: int = 0, title: str = ""
) -> str:
    """One workflow command (https://docs.github.com/actions/reference/workflow-commands-for-github-actions)."""
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
        if line > 0:
            props.append(f"line={line}")
            if col > 0:
                props.append(f"col={col}")
    if title:
        props.append(f"title={_escape_property(title)}")
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{_escape_data(message)}"


def annotate(lines: Iterable[str]) -> None:
    """Prints annotations when running under GitHub Actions; nothing otherwise."""
    if not github_actions():
        return
    for line in lines:
        click.echo(line, err=True)


def spec_error_annotations(errors: Iterable[object]) -> list[str]:
    """SpecErrors (file, line, column, field, message) as error annotations on the spec's own lines."""
    from reconciler.spec._errors import SpecError, display_path

    out = []
    for e in errors:
        if isinstance(e, SpecError):
            message = f"{e.field}: {e.message}" if e.field else e.message
            out.append(
                annotation("error", message, display_path(e.file), e.line, e.column, "npuctl: invalid spec")
            )
    return out


def result_annotations(results: Sequence[SpecResult], specs: Sequence[object]) -> list[str]:
    """Failed stages (at the spec's `target` line) and failed or unverified SLOs (at the SLO's line)."""
    from reconciler.spec._errors import display_path

    by_name = {getattr(s, "name", None): s for s in specs}
    out = []
    for result in results:
        spec = by_name.get(result.name)

        def where(dotted: str, spec: object = spec, result: SpecResult = result) -> tuple[str, int, int]:
            if spec is None:
                return result.file, 0, 0
            file, line, col = spec.position(dotted)  # type: ignore[attr-defined]
            return display_path(file), line, col

        for stage in result.stages:
            if stage.action == "failed":
                file, line, col = where("target")
                message = f"{stage.name} [{stage.variant}] failed: {stage.reason}"
                out.append(annotation("error", message, file, line, col, f"npuctl: {result.name}"))
        for verdict in result.slo:
            if verdict.passed is True:
                continue
            file, line, col = where(f"slo.{verdict.name}")
            from reconciler.output import measured_against

            measured = measured_against(verdict.name, verdict.value, verdict.comparison, verdict.threshold)
            state = "failed" if verdict.passed is False else verdict.verdict
            evidence = f" ({verdict.evidence})" if verdict.evidence else ""
            message = f"{verdict.name} [{verdict.variant}] {state}: {measured}{evidence}"
            level = "error" if verdict.passed is False else "warning"
            out.append(annotation(level, message, file, line, col, f"npuctl: {result.name}"))
    return out
