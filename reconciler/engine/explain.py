"""explain: a stage's key inputs, field by field, against the inputs of its last build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.catalog import targets
from reconciler.engine import keys
from reconciler.engine.chain import build_chain, variants
from reconciler.engine.walk import Artifacts, identity_outputs, link_upstream
from reconciler.engine.workspace import Workspace
from reconciler.spec import LoadedSpec


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


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for name in sorted(value):
            out.update(_leaves(value[name], f"{prefix}.{name}" if prefix else str(name)))
        return out
    return {prefix: value}


def explain(ws: Workspace, spec: LoadedSpec, stage: str | None = None) -> list[StageExplanation]:
    target = targets()[spec.target]
    out = []
    for variant in variants(spec):
        outputs: dict[str, Artifacts | None] = {}
        for setup in build_chain(spec, variant, ws.layout.root, ws.hasher):
            name = setup.stage.name
            linked = link_upstream(setup, outputs)
            last_key = ws.db.head(spec.name, variant.name, name)
            last = ws.db.record(last_key) if last_key else None
            if linked is None:
                outputs[name] = None
                now = {"fields": setup.config, "files": setup.file_digests, "impl": setup.impl_info}
                key, note = None, "upstream not built yet: key known after apply"
            else:
                now = setup.key_inputs(target)
                key = keys.digest(now)
                record = ws.db.record(key)
                note = "" if record is not None else "no record for this key"
                if not setup.active:
                    outputs[name] = identity_outputs(setup, linked)
                else:
                    outputs[name] = record.artifacts if ws.usable(record) and record else None
            before = _leaves(last.key_inputs) if last else {}
            current = _leaves(now)
            rows = [
                (path, current.get(path), before.get(path)) for path in sorted(set(current) | set(before))
            ]
            if stage is None or stage == name:
                explanation = StageExplanation(
                    name,
                    variant.name,
                    key,
                    last_key,
                    key is not None and key == last_key and not note,
                    not setup.active,
                    rows,
                    note or (setup.stage.idle_reason if not setup.active else ""),
                )
                out.append(explanation)
    return out
