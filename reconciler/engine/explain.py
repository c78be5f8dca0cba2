"""explain: a stage's key inputs, field by field, against the inputs of its last build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.catalog import targets
from reconciler.engine.chain import build_chain, variants
from reconciler.engine.resolve import Source, index_locks, resolve
from reconciler.engine.walk import Artifacts, previous
from reconciler.engine.workspace import Workspace
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import lockread


@dataclass
class StageExplanation:
    stage: str
    variant: str
    key: str | None
    last_key: str | None
    up_to_date: bool
    identity: bool
    rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    """(key input path, value now, value at the last build); unchanged rows included."""
    note: str = ""
    disagreements: list[dict[str, str]] = field(default_factory=list)
    """Nodes where the op table and the vendor tool the stage ran place differently (both devices and
    the winner), from the stage's own report of the build."""


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for name in sorted(value):
            out.update(_leaves(value[name], f"{prefix}.{name}" if prefix else str(name)))
        return out
    return {prefix: value}


def explain(ws: Workspace, spec: LoadedSpec, stage: str | None = None) -> list[StageExplanation]:
    """Against the committed lock's record when it holds the key inputs (any clone gives the same
    answer), else this machine's last build; up to date exactly when plan says cached."""
    target = targets()[spec.target]
    index_locks(ws, [spec.path])
    lock, problems = ws.committed_lock(Layout.lock_file(spec.path))
    if problems:
        lock = None
    out = []
    for variant in variants(spec):
        locked = lockread.variant(lock, variant.name)
        outputs: dict[str, Artifacts | None] = {}
        for setup in build_chain(spec, variant, ws.layout.root, ws.hasher):
            name = setup.stage.name
            last = previous(ws.db, spec.name, variant.name, name, locked.record(name))
            resolved = resolve(ws, setup, target, outputs, locked)
            if resolved.key is None:
                now = {"fields": setup.config, "files": setup.file_digests, "impl": setup.impl_info}
                note = "upstream not built yet: key known after apply"
            else:
                now = resolved.key_inputs or {}
                note = resolved.note or _NOTES.get(resolved.source, "")
            before = _leaves(last.key_inputs) if last else {}
            current = _leaves(now)
            rows = [
                (path, current.get(path), before.get(path)) for path in sorted(set(current) | set(before))
            ]
            if stage is None or stage == name:
                out.append(
                    StageExplanation(
                        name,
                        variant.name,
                        resolved.key,
                        last.key if last else None,
                        resolved.found,
                        not setup.active,
                        rows,
                        note or (setup.stage.idle_reason if not setup.active else ""),
                        _disagreements(ws, resolved.key, last),
                    )
                )
    return out


def _disagreements(ws: Workspace, key: str | None, last: Any) -> list[dict[str, str]]:
    """The stage report's per-node disagreements between the op table and the vendor tool (this key's
    record when built here, else the last build's)."""
    record = (ws.db.record(key) if key else None) or last
    report = getattr(record, "report", None) or {}
    placement = report.get("placement") if isinstance(report, dict) else None
    found = placement.get("disagreements") if isinstance(placement, dict) else None
    return [dict(d) for d in found or [] if isinstance(d, dict)]


_NOTES = {
    Source.MISSING: "no record for this key",
    Source.LOCK: "recorded in the lock (not in the local store)",
}
