"""Audit output: a summary (model version x SLO), the failing streaks, then every entry.

Each verdict cell carries value, threshold and evidence, so a reader never confuses a host measurement or
an estimate with a device measurement.
"""

from __future__ import annotations

import json

from backends.sdk.vocab import Verdict
from reconciler.audit.entries import CANCELLED, AuditEntry
from reconciler.audit.query import Audit
from reconciler.output import measured_against, shorten
from reconciler.records.judged import Judged

STATE = {
    **{v.word: v.label for v in (Verdict.PASS, Verdict.FAIL, Verdict.UNVERIFIED)},
    CANCELLED: f"⏹ {CANCELLED}",
}


def settings_text(settings: dict[str, str]) -> str:
    """`quantization ptq int8/uint8 #a1b2c3; onnxruntime 1.23.0`: what tells two builds apart."""
    parts = [f"quantization {settings['quantization']}"] if settings.get("quantization") else []
    parts += [settings["toolchain"]] if settings.get("toolchain") else []
    return "; ".join(parts) or "—"


def verdict_cell(v: Judged, marks: bool = True, signed_by: str | None = None) -> str:
    """`❌ 217.3 > 150 ms (measured:device; signed by ci)`: the mark (or the word), the value against
    its bound, and who signed the records it rests on (reconciler.trust)."""
    judged = Verdict.of(v.verdict)
    mark = (judged.mark if judged else "") if marks else v.verdict
    evidence = v.evidence or "no measurement"
    if signed_by:
        evidence += f"; signed by {signed_by}"
    measured = measured_against(v.name, v.value, v.comparison or "<=", v.threshold)
    return f"{mark} {measured} ({evidence})".strip()


def toolchain_text(entry: AuditEntry) -> str:
    """Distinct tool versions across stages, e.g. "onnx 1.23.2, onnxruntime 1.23.0"."""
    versions: dict[str, str] = {}
    for stage in entry.toolchains.values():
        for tool, version in sorted((stage.get("fingerprint") or {}).items()):
            versions.setdefault(tool, str(version))
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "—"


def _when(entry: AuditEntry) -> str:
    return entry.time.strftime("%Y-%m-%d %H:%M")


def _streak_lines(audit: Audit) -> list[str]:
    lines = []
    for streak in audit.streaks():
        if streak.since is None:
            lines.append(f"{streak.spec}: passing at its newest entry")
            continue
        since = streak.since
        what = "failing" if streak.state == Verdict.FAIL.word else "not passing"
        subject = f" ({shorten(since.subject)})" if since.subject else ""
        lines.append(
            f"{streak.spec}: {what} since {since.label}{subject}, {_when(since)} ({streak.length} entries)"
        )
    return lines


def to_markdown(audit: Audit) -> str:
    lines = ["### npuctl audit", ""]
    lines += [f"> {w}" for w in audit.warnings]
    summary = audit.summary()
    if not audit.entries:
        return "\n".join([*lines, "No lock file history matches.", ""])
    names = sorted({name for row in summary for name in row.verdicts})
    lines += ["#### Which model version meets which SLO", ""]
    lines += ["| spec | target | model | settings | latest | " + " | ".join(names) + " |"]
    lines += ["|" + "---|" * (5 + len(names))]
    for row in summary:
        cells = [verdict_cell(row.verdicts[n]) if n in row.verdicts else "—" for n in names]
        lines.append(
            f"| `{row.spec}` | `{row.target}` | `{row.model}` | {settings_text(row.settings)} | {row.latest} | "
            + " | ".join(cells)
            + " |"
        )
    lines += ["", "#### Failing since", ""]
    lines += [f"- {line}" for line in _streak_lines(audit)]
    lines += ["", "#### History", ""]
    lines += [
        "| when | source | spec | target | model | status | SLOs | toolchain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in audit.entries:
        slos = "<br>".join(
            f"{v.name}: {verdict_cell(v, signed_by=e.signed_by.get(v.variant))}" for v in e.verdicts
        ) or (e.attempt or "—")
        label = f"`{e.label}` {shorten(e.subject)}".strip() if e.source == "commit" else e.label
        lines.append(
            f"| {_when(e)} | {label.replace('|', '/')} | `{e.spec}` | `{e.target}` | `{e.model}` | "
            f"{STATE.get(e.state, e.state)} | {slos} | {toolchain_text(e)} |"
        )
    return "\n".join(lines) + "\n"


def to_json(audit: Audit) -> str:
    return json.dumps(audit.to_json(), indent=2, sort_keys=True)


def print_text(audit: Audit) -> None:
    from rich.table import Table

    from reconciler.output import console

    out = console()
    for warning in audit.warnings:
        out.print(f"note: {warning}", markup=False, highlight=False)
    if not audit.entries:
        out.print("no lock file history matches")
        return
    summary = audit.summary()
    names = sorted({name for row in summary for name in row.verdicts})
    table = Table(
        title="which model version meets which SLO", box=None, header_style="bold", title_justify="left"
    )
    for column in ("spec", "target", "model", "settings", "latest", *names):
        table.add_column(column, overflow="fold")
    for row in summary:
        cells = [verdict_cell(row.verdicts[n], marks=False) if n in row.verdicts else "—" for n in names]
        table.add_row(row.spec, row.target, row.model, settings_text(row.settings), row.latest, *cells)
    out.print(table)
    out.print()
    for line in _streak_lines(audit):
        out.print(line, markup=False, highlight=False)
    out.print()
    history = Table(title="history", box=None, header_style="bold", title_justify="left")
    for column in ("when", "source", "spec", "target", "model", "state", "SLOs", "toolchain"):
        history.add_column(column, overflow="fold")
    for e in audit.entries:
        slos = "\n".join(
            f"{v.name}: {verdict_cell(v, marks=False, signed_by=e.signed_by.get(v.variant))}"
            for v in e.verdicts
        ) or (e.attempt or "—")
        label = f"{e.label} {shorten(e.subject)}".strip() if e.source == "commit" else e.label
        history.add_row(_when(e), label, e.spec, e.target, e.model, e.state, slos, toolchain_text(e))
    out.print(history)
