"""`plan --base REF` three ways: a pull-request comment (Markdown), a terminal section, JSON.

The Markdown keeps the summary table of the changed specs always visible, first, and folds what can
be long (the unchanged specs, field diffs, stage lists) into <details> blocks, so a comment on a PR
touching many specs stays readable. A spec whose SLOs are partly unverified (met only on an estimate,
nothing measured) and none failed reads as unverified, never as a failure: it fails nothing.
"""

from __future__ import annotations

import json
from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.engine.results import SpecResult
from reconciler.gitops.compare import Comparison, SpecComparison
from reconciler.gitops.layers import LayerChange
from reconciler.gitops.slo import SloCount, SloRow
from reconciler.output import number, shorten
from reconciler.trust.policy import FILE as POLICY_FILE

FOLD_AFTER = 8
"""Tables with more rows than this are folded into a <details> block."""
CHANGE = {"added": "🆕 added", "removed": "🗑️ removed", "modified": "✏️ modified", "unchanged": "unchanged"}


def value_text(value: Any, limit: int = 60) -> str:
    text = "—" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return shorten(text, limit)


def delta_text(row: SloRow) -> str:
    if row.delta is None:
        return "—"
    if row.delta == 0:
        return "0"
    text = ("+" if row.delta > 0 else "") + number(row.delta)
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


def count_text(count: SloCount) -> str:
    """`1/3 passed, 2 unverified` with the mark of the worst: ❌ when any failed, ⚪ when the rest are
    unverified, ✅ when all passed; `—` when none is set."""
    if not count.total:
        return "—"
    if count.failed:
        mark, rest = Verdict.FAIL.mark, f", {count.failed} failed"
    elif count.unverified:
        mark, rest = Verdict.UNVERIFIED.mark, ""
    else:
        mark, rest = Verdict.PASS.mark, ""
    rest += f", {count.unverified} {Verdict.UNVERIFIED.word}" if count.unverified else ""
    return f"{mark} {count.passed}/{count.total} passed{rest}"


def slo_cell(spec: SpecComparison) -> str:
    base = count_text(spec.slo_base)
    if spec.change == "removed":
        return f"{base} → removed"
    if not spec.applied:
        return f"{base} → ⏳ pending apply"
    return f"{base} → {count_text(spec.slo_now)}"


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
        f"{'+' if c.delta_ms > 0 else ''}{number(c.delta_ms)} | {_escape(changed)} |"
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
    lines += [f"- ⚠️ `{_escape(why)}`: its verdicts count as {Verdict.UNKNOWN.word}" for why in spec.untrusted]
    if spec.errors or spec.base_errors or spec.untrusted:
        lines.append("")
    if spec.base_target and spec.target and spec.base_target != spec.target:
        lines += [f"Target changed: `{spec.base_target}` → `{spec.target}`.", ""]
    return lines + _fields_md(spec) + _stages_md(spec) + _slo_md(spec) + _layers_md(spec)


def is_changed(spec: SpecComparison) -> bool:
    """A spec the pull request touches or that has something to say: changed, work pending, errors."""
    return spec.change != "unchanged" or bool(spec.stages or spec.errors)


_SUMMARY_HEAD = [
    "| spec | target | change | stages to rebuild | SLOs (base → now) |",
    "|---|---|---|---|---|",
]


def _summary_row(spec: SpecComparison) -> str:
    rebuild = ", ".join(spec.rebuilds) or ("—" if spec.change == "removed" else "none")
    target = spec.target or spec.base_target or "?"
    return f"| `{spec.name}` | `{target}` | {CHANGE.get(spec.change, spec.change)} | {rebuild} | {slo_cell(spec)} |"


def _policy_md(comparison: Comparison) -> list[str]:
    change = comparison.policy
    if change is None:
        return []
    parts = [
        f"adds {', '.join(change.added)}" if change.added else "",
        f"removes {', '.join(change.removed)}" if change.removed else "",
    ]
    said = "; ".join(p for p in parts if p)
    return [
        f"**⚠️ This change edits the trust policy** (`{POLICY_FILE}`): {said}. Records are judged by the "
        f"policy of `{comparison.ref}`: keys this change adds count only once it is merged.",
        "",
    ]


def to_markdown(comparison: Comparison, exit_code: int) -> str:
    """The changed specs first (a row each, then their details); the unchanged ones in one folded
    table; a result line (the plan's outcome and exit code) at the top and at the end."""
    counts: dict[str, int] = {}
    for spec in comparison.specs:
        counts[spec.change] = counts.get(spec.change, 0) + 1
    summary = ", ".join(f"{n} {change}" for change, n in sorted(counts.items()))
    outcome = {0: "nothing to do", 2: "changes pending", 1: "errors"}.get(exit_code, str(exit_code))
    result = f"**{_plural(len(comparison.specs), 'spec')}**: {summary or 'none'} · plan: {outcome} (exit {exit_code})"
    touched = [spec for spec in comparison.specs if is_changed(spec)]
    rest = [spec for spec in comparison.specs if not is_changed(spec)]
    lines = [f"### npuctl plan against `{comparison.ref}` (`{comparison.commit[:10]}`)", "", result, ""]
    lines += _policy_md(comparison)
    if touched:
        lines += [*_SUMMARY_HEAD, *(_summary_row(spec) for spec in touched), ""]
    if rest:
        table = [*_SUMMARY_HEAD, *(_summary_row(spec) for spec in rest)]
        title = f"{_plural(len(rest), 'unchanged spec')}: nothing to rebuild"
        lines += ["<details>", f"<summary>{title}</summary>", "", *table, "", "</details>", ""]
    for spec in touched:
        lines += _spec_md(spec)
    lines += [f"**Result**: {result.replace('**', '')}"]
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
    for line in _policy_md(comparison)[:1]:
        out.print(line.replace("**", ""), markup=False, highlight=False)
    for spec in (s for s in comparison.specs if is_changed(s)):
        target = spec.target or spec.base_target or "?"
        out.print(f"  [bold]{spec.name}[/bold] → {target}: {spec.change}", highlight=False)
        for e in spec.base_errors:
            out.print(f"    at base: {e}", markup=False, highlight=False)
        for why in spec.untrusted:
            out.print(
                f"    {why}: its verdicts count as {Verdict.UNKNOWN.word}", markup=False, highlight=False
            )
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
                    f"      {lc.key[:70]}: {number(lc.base_ms)} -> {number(lc.now_ms)} ms "
                    f"({'+' if lc.delta_ms > 0 else ''}{number(lc.delta_ms)})"
                    + (f" {changed}" if changed else ""),
                    markup=False,
                    highlight=False,
                )
    rest = [spec.name for spec in comparison.specs if not is_changed(spec)]
    if rest:
        names = shorten(", ".join(rest), 120)
        out.print(f"  {_plural(len(rest), 'unchanged spec')}: {names}", markup=False, highlight=False)
