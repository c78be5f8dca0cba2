"""`plan --base REF` three ways: a pull-request comment (Markdown), a terminal section, JSON.

The Markdown keeps the summary table always visible and folds what can be long (field diffs, stage
lists) into <details> blocks, so a comment on a PR touching many specs stays readable.
"""

from __future__ import annotations

import json
from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.engine.results import SpecResult
from reconciler.gitops.compare import Comparison, SpecComparison
from reconciler.gitops.layers import LayerChange
from reconciler.gitops.slo import SloRow

FOLD_AFTER = 8
"""Tables with more rows than this are folded into a <details> block."""
CHANGE = {"added": "🆕 added", "removed": "🗑️ removed", "modified": "✏️ modified", "unchanged": "unchanged"}


def number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def value_text(value: Any, limit: int = 60) -> str:
    text = "—" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def delta_text(row: SloRow) -> str:
    if row.delta is None:
        return "—"
    if row.delta == 0:
        return "0"
    text = f"{row.delta:+.4g}"
    if row.noise:
        return text + " (within the measured p50..p99 spread: noise)"
    if row.relative is not None:
        text += f" ({row.relative:+.1%})"
    arrow = {True: " ▲ better", False: " ▼ worse"}.get(row.better) if row.better is not None else ""
    return text + (arrow or "")


def verdict_text(row: SloRow, applied: bool) -> str:
    if not applied:
        return "⏳ pending apply"
    if row.new_verdict is None:
        return "dropped"
    old = row.old_verdict
    judged = Verdict.of(row.new_verdict)
    new = judged.label if judged else row.new_verdict
    return new if old in (None, row.new_verdict) else f"{new} (was {old})"


def threshold_text(row: SloRow) -> str:
    bound = row.threshold if row.threshold is not None else row.old_threshold
    text = f"{row.comparison} {number(bound)}"
    if row.old_threshold is not None and row.threshold is not None and row.old_threshold != row.threshold:
        text += f" (was {number(row.old_threshold)})"
    return text


def slo_cell(spec: SpecComparison) -> str:
    (bp, bt), (np_, nt) = spec.slo_base, spec.slo_now
    base = f"{bp}/{bt}" if bt else "—"
    if spec.change == "removed":
        return f"{base} → removed"
    if not spec.applied:
        return f"{base} → ⏳ pending apply"
    mark = Verdict.PASS.mark if nt and np_ == nt else Verdict.FAIL.mark if nt else ""
    return f"{base} → {np_}/{nt} {mark}".rstrip()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fold(summary: str, lines: list[str], rows: int) -> list[str]:
    if rows <= FOLD_AFTER:
        return [*lines, ""]
    return ["<details>", f"<summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def _fields_md(spec: SpecComparison) -> list[str]:
    changes = [*spec.fields, *spec.files]
    if not changes:
        return []
    lines = ["| field | base | now | read by |", "|---|---|---|---|"]
    for c in changes:
        stages = ", ".join(c.stages) if c.stages else "no stage (nothing rebuilds)"
        old, new = _escape(value_text(c.old)), _escape(value_text(c.new))
        lines.append(f"| `{c.path}` | `{old}` | `{new}` | {stages} |")
    return ["**Changed fields**", "", *_fold(f"{len(changes)} changed fields", lines, len(changes))]


def _stages_md(spec: SpecComparison) -> list[str]:
    if not spec.stages:
        return ["**Plan**: nothing to rebuild.", ""] if spec.change != "removed" else []
    lines = ["| stage | variant | action | reason |", "|---|---|---|---|"]
    for s in spec.stages:
        lines.append(f"| {s.name} | {s.variant} | **{s.action}** | {_escape(s.reason)} |")
    idle = f", {spec.identity_stages} idle" if spec.identity_stages else ""
    head = f"**Plan**: {len(spec.stages)} to run, {spec.cached_stages} cached{idle}"
    return [head, "", *_fold(f"{len(spec.stages)} stages", lines, len(spec.stages))]


def _slo_md(spec: SpecComparison) -> list[str]:
    if not spec.slo:
        return []
    note = (
        ""
        if spec.applied or spec.change == "removed"
        else (
            " — the work tree's lock file is not up to date with the spec: run `npuctl apply` and commit it"
        )
    )
    lines = [f"**SLOs** (base → now){note}", ""]
    lines += [
        "| SLO | variant | threshold | base | now | delta | verdict | evidence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in spec.slo:
        now = number(row.new) if spec.applied else "⏳"
        lines.append(
            f"| {row.name} | {row.variant} | {threshold_text(row)} | {number(row.old)} | {now} | "
            f"{delta_text(row) if spec.applied else '—'} | {verdict_text(row, spec.applied)} | {row.evidence or '—'} |"
        )
    return [*lines, ""]


def _layer_row(c: LayerChange) -> str:
    changed = "; ".join(f"{k} {a} → {b}" for k, (a, b) in c.changed.items()) or "—"
    return (
        f"| `{_escape(c.key)[:80]}` | {c.op_type or '?'} | {number(c.base_ms)} | {number(c.now_ms)} | "
        f"{c.delta_ms:+.4f} | {_escape(changed)} |"
    )


def _layers_md(spec: SpecComparison) -> list[str]:
    from reconciler.gitops.layers import SHOWN

    lines: list[str] = []
    for v in spec.layers:
        head = f"**Layers** [{v.variant}] (profile base → now)"
        if v.missing:
            lines += [f"{head}: {v.missing}", ""]
            continue
        rows = v.slower[:SHOWN] + [c for c in v.changed if c not in v.slower][:SHOWN]
        lines += [
            f"{head}: layers sum {number(v.base_total_ms)} → {number(v.now_total_ms)} ms; "
            f"{len(v.slower)} slower, {v.faster} faster, {len(v.changed)} moved or changed precision, "
            f"{len(v.added)} added, {len(v.removed)} removed",
            "",
        ]
        if rows:
            lines += ["| layer | op | base ms | now ms | delta ms | changed |", "|---|---|---|---|---|---|"]
            lines += [_layer_row(c) for c in rows] + [""]
    return lines


def _spec_md(spec: SpecComparison) -> list[str]:
    target = spec.target or spec.base_target or "?"
    lines = [f"#### `{spec.name}` → `{target}`: {CHANGE.get(spec.change, spec.change)}", ""]
    lines += [f"- ❗ `{e}`" for e in spec.errors]
    lines += [f"- at base: `{e}`" for e in spec.base_errors]
    if spec.errors or spec.base_errors:
        lines.append("")
    if spec.base_target and spec.target and spec.base_target != spec.target:
        lines += [f"Target changed: `{spec.base_target}` → `{spec.target}`.", ""]
    return lines + _fields_md(spec) + _stages_md(spec) + _slo_md(spec) + _layers_md(spec)


def to_markdown(comparison: Comparison, exit_code: int) -> str:
    counts: dict[str, int] = {}
    for spec in comparison.specs:
        counts[spec.change] = counts.get(spec.change, 0) + 1
    summary = ", ".join(f"{n} {change}" for change, n in sorted(counts.items()))
    outcome = {0: "nothing to do", 2: "changes pending", 1: "errors"}.get(exit_code, str(exit_code))
    lines = [
        f"### npuctl plan against `{comparison.ref}` (`{comparison.commit[:10]}`)",
        "",
        f"**{_plural(len(comparison.specs), 'spec')}**: {summary or 'none'} · plan: {outcome} (exit {exit_code})",
        "",
        "| spec | target | change | stages to rebuild | SLOs met (base → now) |",
        "|---|---|---|---|---|",
    ]
    for spec in comparison.specs:
        rebuild = ", ".join(spec.rebuilds) or ("—" if spec.change == "removed" else "none")
        target = spec.target or spec.base_target or "?"
        lines.append(
            f"| `{spec.name}` | `{target}` | {CHANGE.get(spec.change, spec.change)} | {rebuild} | {slo_cell(spec)} |"
        )
    lines.append("")
    for spec in comparison.specs:
        if spec.change != "unchanged" or spec.stages or spec.errors:
            lines += _spec_md(spec)
    return "\n".join(lines).rstrip() + "\n"


def to_json(results: list[SpecResult], comparison: Comparison) -> str:
    from reconciler.output import to_json as plan_json

    payload = json.loads(plan_json(results, "plan"))
    payload["base"] = comparison.to_json()
    return json.dumps(payload, indent=2, sort_keys=True)


def print_text(comparison: Comparison) -> None:
    from reconciler.output import console

    out = console()
    out.print(f"[bold]against {comparison.ref}[/bold] ({comparison.commit[:10]})", highlight=False)
    for spec in comparison.specs:
        target = spec.target or spec.base_target or "?"
        out.print(f"  [bold]{spec.name}[/bold] → {target}: {spec.change}", highlight=False)
        for e in spec.base_errors:
            out.print(f"    at base: {e}", markup=False, highlight=False)
        for c in [*spec.fields, *spec.files]:
            stages = ", ".join(c.stages) or "no stage"
            line = f"    {c.path}: {value_text(c.old)} -> {value_text(c.new)}  ({stages})"
            out.print(line, markup=False, highlight=False)
        if spec.rebuilds:
            out.print(f"    rebuilds: {', '.join(spec.rebuilds)}", markup=False, highlight=False)
        if spec.slo and not spec.applied and spec.change != "removed":
            out.print(
                "    SLOs: pending apply (the lock file is not up to date)", markup=False, highlight=False
            )
        for row in spec.slo if spec.applied else []:
            line = (
                f"    {row.name} [{row.variant}] {threshold_text(row)}: {number(row.old)} -> {number(row.new)}"
                f" ({delta_text(row)}) {row.new_verdict or 'dropped'}"
            )
            out.print(line, markup=False, highlight=False)
        for v in spec.layers:
            if v.missing:
                out.print(f"    layers [{v.variant}]: {v.missing}", markup=False, highlight=False)
                continue
            out.print(
                f"    layers [{v.variant}]: sum {number(v.base_total_ms)} -> {number(v.now_total_ms)} ms; "
                f"{len(v.slower)} slower, {v.faster} faster, {len(v.changed)} moved or changed precision",
                markup=False,
                highlight=False,
            )
            for lc in v.slower[:5] + [x for x in v.changed if x not in v.slower][:5]:
                changed = "; ".join(f"{k} {a} -> {b}" for k, (a, b) in lc.changed.items())
                out.print(
                    f"      {lc.key[:70]}: {number(lc.base_ms)} -> {number(lc.now_ms)} ms ({lc.delta_ms:+.4f})"
                    + (f" {changed}" if changed else ""),
                    markup=False,
                    highlight=False,
                )
