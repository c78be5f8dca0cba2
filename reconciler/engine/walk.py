"""Walking a chain: wiring upstream artifacts into each stage and saying why a key changed.

Shared by plan (which only looks up records) and apply (which builds what is missing).
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.engine import keys
from reconciler.engine.chain import StageSetup
from reconciler.state.db import Record

Artifacts = dict[str, dict[str, Any]]
"""artifact name -> {"digest", "file", "size"}"""


def link_upstream(
    setup: StageSetup, outputs: dict[str, Artifacts | None]
) -> dict[str, dict[str, Any]] | None:
    """The upstream artifacts this stage uses, by input name; None while any of them is still unknown.

    Also records their digests in `setup.upstream`, which is what the key sees (early cutoff).
    """
    linked: dict[str, dict[str, Any]] = {}
    for input_name, (stage, artifact) in setup.stage.uses.items():
        produced = outputs.get(stage)
        if produced is None:
            return None
        if artifact is None:
            linked.update(produced)
        elif artifact in produced:
            linked[input_name] = produced[artifact]
    setup.upstream = {name: meta["digest"] for name, meta in sorted(linked.items())}
    return linked


def identity_outputs(setup: StageSetup, linked: dict[str, dict[str, Any]]) -> Artifacts:
    """An idle stage passes its inputs through under the same names."""
    return {name: linked[name] for name in setup.stage.uses if name in linked}


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(path: str, old: Any, new: Any) -> str:
    section, _, rest = path.partition(".")
    if section == "fields":
        if old is None:
            return f"spec.{rest} set to {_short(new)}"
        return f"spec.{rest}: {_short(old)} -> {_short(new)}"
    if section == "files":
        return f"{rest} content changed"
    if section == "upstream":
        return f"input {rest} changed"
    if section == "impl":
        return f"implementation {rest}: {_short(old)} -> {_short(new)}"
    if section == "target":
        return f"catalog target.{rest}: {_short(old)} -> {_short(new)}"
    return f"{path} changed"


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human lines, one per changed leaf of the key inputs."""
    return [_describe(path, a, b) for path, a, b in keys.diff(old, new)]


def previous(db: Any, spec: str, variant: str, stage: str, locked: Record | None) -> Record | None:
    """What a changed key is explained against: the committed lock's record when it holds the key
    inputs (so every clone gives the same reason), else this machine's last build."""
    if locked is not None and locked.key_inputs:
        return locked
    head_key = db.head(spec, variant, stage)
    return db.record(head_key) if head_key else None


def reason(head: Record | None, new_inputs: dict[str, Any], limit: int = 3) -> str:
    if head is None:
        return "never built"
    lines = changes(head.key_inputs, new_inputs)
    if not lines:
        return "inputs unchanged, output missing from the store"
    more = f" (+{len(lines) - limit} more)" if len(lines) > limit else ""
    return "; ".join(lines[:limit]) + more
