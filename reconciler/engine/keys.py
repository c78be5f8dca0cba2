"""Build keys: sha256 over the canonical JSON of everything a stage's output depends on.

The key inputs are kept whole in each record, so `explain` and `plan` can say which field changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from backends.catalog import Target

IMPL_IDENTITY = {"name": "identity", "version": "1", "fingerprint": {}}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


_FACTS: dict[str, dict[str, Any]] = {}


def target_facts(target: Target) -> dict[str, Any]:
    """The catalog entry as it enters a key: figures, op-table id and version (not free text)."""
    if target.id not in _FACTS:
        facts = asdict(target)
        for free_text in ("description", "extra"):
            facts.pop(free_text, None)
        _FACTS[target.id] = json.loads(canonical(facts))  # tuples as lists, as records store them
    return _FACTS[target.id]


def key_inputs(
    stage: str,
    impl: dict[str, Any],
    fields: dict[str, Any],
    files: dict[str, str | None],
    upstream: dict[str, str],
    target: Target | None,
) -> dict[str, Any]:
    return {
        "stage": stage,
        "impl": impl,
        "fields": fields,
        "files": files,
        "upstream": upstream,
        "target": None if target is None else target_facts(target),
    }


def output_digest(artifacts: dict[str, str], report: dict[str, Any]) -> str:
    """What downstream keys see of a stage: early cutoff happens when this is unchanged."""
    return digest({"artifacts": artifacts, "report": report})


def diff(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Leaf-level differences between two JSON values, as (dotted path, old, new)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for name in sorted(set(old) | set(new)):
            path = f"{prefix}.{name}" if prefix else str(name)
            out.extend(diff(old.get(name), new.get(name), path))
        return out
    return [] if old == new else [(prefix, old, new)]
