"""explain --profile: the evaluate stage's per-layer profile (its profile.json artifact), rendered.

The profile is read from the store through the digest the lock file records; its content is the
backend's (backends.profiles): this module only lays it out, as a table of where the time goes and
the ranked suggestions, or as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.engine.workspace import Workspace
from reconciler.output import number
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import lockread


def load(ws: Workspace, spec: LoadedSpec) -> dict[str, Any]:
    """variant -> its profile, or {"missing": why} when there is none to read here."""
    lock = lockread.read(Layout.lock_file(spec.path))
    out: dict[str, Any] = {}
    if lock is None or not lock.variants:
        return {"default": {"missing": "nothing built yet (no lock file): run npuctl apply"}}
    for name, variant in sorted(lock.variants.items()):
        evaluate = variant.stages.get("evaluate")
        entry = evaluate.artifacts.get("profile") if evaluate is not None else None
        if entry is None:
            out[name] = {"missing": "evaluate recorded no profile (its runtime gives none, or it never ran)"}
        elif not ws.intact(entry.digest):
            out[name] = {"missing": f"profile.json {entry.digest[:12]} is not in this store: npuctl apply"}
        else:
            out[name] = _read(ws.store.path(entry.digest))
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"missing": f"profile.json unreadable: {exc}"}
    return data if isinstance(data, dict) else {"missing": "profile.json is not an object"}


def render(spec: str, profiles: dict[str, Any], as_json: bool) -> int:
    if as_json:
        click.echo(
            json.dumps({"format_version": 1, "spec": spec, "profiles": profiles}, indent=2, sort_keys=True)
        )
        return 0
    from rich.table import Table

    from reconciler.output import console as make_console

    console = make_console()
    for variant, profile in profiles.items():
        if "missing" in profile:
            console.print(
                f"[bold]{spec}[/bold] \\[{variant}]: no profile: {profile['missing']}", highlight=False
            )
            continue
        a, latency = profile.get("attribution") or {}, profile.get("latency_ms") or {}
        console.print(
            f"[bold]{spec}[/bold] \\[{variant}]: {profile.get('runtime')} ({profile.get('evidence')}), "
            f"{profile.get('runs')} profiled runs; layers sum {number(a.get('layers_sum_ms'))} ms, profiled run "
            f"{number(latency.get('profiled_p50'))} ms, timed p50 {number(latency.get('timed_p50'))} ms",
            highlight=False,
        )
        console.print(f"  {profile.get('how')}", highlight=False)
        if a.get("run_fixed_ms") is not None:
            console.print(
                f"  of the timed p50: layers {_pct(a.get('layers_of_timed'))}, with the run's fixed cost "
                f"{number(a.get('run_fixed_ms'))} ms and dispatch {number(a.get('dispatch_ms'))} ms "
                f"{_pct(a.get('accounted_of_timed'))}; unattributed {number(a.get('unattributed_ms'))} ms"
                + (
                    " (coarse: layers of ~1 us, shares indicative)"
                    if (a.get("resolution") or {}).get("coarse")
                    else ""
                ),
                highlight=False,
            )
        shares = a.get("shares") or {}
        console.print(
            "  shares: "
            + ", ".join(f"{k} {_pct(v)}" for k, v in shares.items())
            + f"; utilisation {_pct(a.get('utilisation_estimate'))} of {a.get('utilisation_peak')} (estimated)",
            highlight=False,
        )
        table = Table(box=None, header_style="bold")
        for column in ("layer", "op", "device", "placement", "ms", "share", "bound", "of roofline"):
            table.add_column(column, overflow="fold")
        for t in a.get("top") or []:
            table.add_row(
                _layer_name(t),
                str(t.get("op_type")),
                str(t.get("device")),
                str(t.get("placement") or "-"),
                number(float(t["time_ms"])),
                _pct(t.get("share")),
                str(t.get("bound")),
                _pct(t.get("achieved_of_roofline")),
            )
        console.print(table)
        suggestions = profile.get("suggestions") or []
        if not suggestions:
            console.print("  suggestions: none worth 2 % of the profiled time", highlight=False)
        for i, s in enumerate(suggestions, 1):
            console.print(
                f"  {i}. {s['field']}: ~{number(float(s['expected_gain_ms']))} ms ({_pct(s.get('share'))}, "
                f"estimated) - {s['why']}",
                highlight=False,
            )
    return 0


def _layer_name(layer: dict[str, Any]) -> str:
    """The ONNX nodes a runtime layer ran (its own name is often the runtime's, e.g. a fused kernel)."""
    nodes = list(layer.get("onnx_nodes") or [])
    if not nodes:
        why = "runtime's own" if layer.get("inserted") else "not mapped"
        return f"{layer['name']} ({why})"
    return ", ".join(nodes[:4]) + (f" +{len(nodes) - 4}" if len(nodes) > 4 else "")


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1%}"
