"""The field-level difference between two versions of a spec, each field with the stages it feeds.

Compared after `extends` merging and path rebasing, so moving a setting into a base file is not a change,
and only effective values count (comments and key order never show up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.engine.stages import STAGES
from reconciler.spec import LoadedSpec


@dataclass(frozen=True)
class FieldChange:
    path: str
    """Dotted path from the document root, e.g. spec.quantization.mode"""
    old: Any
    new: Any
    stages: tuple[str, ...]
    """Stages whose build key reads the field; ("verify",) for SLOs; () for metadata."""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new, "stages": list(self.stages)}


def document(spec: LoadedSpec) -> dict[str, Any]:
    """The merged deployment as JSON (what the engine sees); `extends` is layout, not a setting."""
    data: dict[str, Any] = spec.deployment.model_dump(mode="json", by_alias=True)
    data.pop("extends", None)
    return data


def leaf_diff(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, old, new) per differing leaf; mappings recurse, lists and scalars are leaves."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for name in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{name}" if prefix else str(name)
            out.extend(leaf_diff(old.get(name), new.get(name), path))
        return out
    return [] if old == new else [(prefix, old, new)]


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _key_fields(stage: str) -> tuple[str, ...]:
    spec = next(s for s in STAGES if s.name == stage)
    files = [f for path in spec.files.values() for f in (path.dotted, path.package) if f is not None]
    return (*spec.reads, *files)


def affected_stages(path: str) -> tuple[str, ...]:
    """Stages whose build key covers the field at a dotted document path."""
    if path == "spec.slo" or path.startswith("spec.slo."):
        return ("verify",)
    if not path.startswith("spec."):
        return ()
    field_path = path.removeprefix("spec.")
    return tuple(s.name for s in STAGES if any(_overlaps(field_path, f) for f in _key_fields(s.name)))


def diff(old: LoadedSpec | None, new: LoadedSpec | None) -> list[FieldChange]:
    """Changed fields from `old` to `new` (either may be None: the spec was added or removed)."""
    before = document(old) if old is not None else {}
    after = document(new) if new is not None else {}
    return [FieldChange(p, a, b, affected_stages(p)) for p, a, b in leaf_diff(before, after)]


def file_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[FieldChange]:
    """Input files whose content changed, from the `sources.files` digests of two lock files or plans."""
    if not old or not new:
        return []
    names = {name: (stage.name,) for stage in STAGES for name in stage.files}
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name) and old.get(name) is not None and new.get(name) is not None:
            out.append(FieldChange(f"files.{name}", old.get(name), new.get(name), names.get(name, ())))
    return out
