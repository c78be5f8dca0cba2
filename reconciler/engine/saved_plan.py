"""A saved plan (`plan -out FILE`, then `apply FILE`): Terraform's meaning.

The file records, per spec, what the plan stood on (the merged spec, the lock file's bytes, the digest
of every input file) and what it decided (every stage's action and key). `apply FILE` re-plans the same
specs and refuses, naming the first difference, unless every one of those is unchanged; when they are,
the stage keys are the plan's, so apply builds exactly what the plan said.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine import keys
from reconciler.engine.chain import build_chain, variants
from reconciler.engine.results import SpecResult
from reconciler.engine.sources import file_digests
from reconciler.engine.workspace import Workspace
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors

KIND = "npuctl-plan"
FORMAT_VERSION = 1


class PlanFileError(Exception):
    """One line: why a plan file cannot be read."""


@dataclass(frozen=True)
class PlannedStage:
    variant: str
    stage: str
    action: str
    key: str | None


@dataclass(frozen=True)
class PlannedSpec:
    name: str
    file: str
    """The spec file, relative to the repository root."""
    spec: dict[str, Any]
    """The merged `spec` section the plan read (the spec digest's input), so a change is named by field."""
    lock_digest: str | None
    """sha256 of the lock file's bytes; None when there was none."""
    inputs: dict[str, str | None]
    """variant/input name -> content digest of every file the stages read."""
    stages: list[PlannedStage] = field(default_factory=list)


@dataclass(frozen=True)
class SavedPlan:
    specs: list[PlannedSpec]

    def to_json(self) -> str:
        payload = {"kind": KIND, "format_version": FORMAT_VERSION, "specs": [asdict(s) for s in self.specs]}
        return json.dumps(payload, indent=1, sort_keys=True) + "\n"

    def spec_files(self, root: Path) -> list[Path]:
        return [root / s.file for s in self.specs]


def _lock_digest(spec_path: Path) -> str | None:
    lock = Layout.lock_file(spec_path)
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None


def _inputs(ws: Workspace, spec: LoadedSpec) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for variant in variants(spec):
        chain = build_chain(spec, variant, ws.layout.root, ws.hasher)
        out.update({f"{variant.name}/{name}": digest for name, digest in file_digests(chain).items()})
    return out


def _relative(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return (
        str(resolved.relative_to(root.resolve()))
        if resolved.is_relative_to(root.resolve())
        else str(resolved)
    )


def planned(ws: Workspace, spec: LoadedSpec, result: SpecResult) -> PlannedSpec:
    """What one spec's plan stood on and decided. A spec whose chain cannot be built (its errors are the
    plan's) records no inputs."""
    try:
        inputs = _inputs(ws, spec)
    except SpecErrors:
        inputs = {}
    return PlannedSpec(
        spec.name,
        _relative(spec.path, ws.layout.root),
        spec.field(""),
        _lock_digest(spec.path),
        inputs,
        [PlannedStage(s.variant, s.name, s.action, s.key) for s in result.stages],
    )


def save(ws: Workspace, specs: list[LoadedSpec], results: list[SpecResult]) -> SavedPlan:
    by_name = {r.name: r for r in results}
    return SavedPlan([planned(ws, spec, by_name[spec.name]) for spec in specs])


def is_plan_file(path: Path) -> bool:
    """A file that is not a spec and opens as a plan file's JSON object."""
    if path.suffix in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and KIND.encode() in head


def read(path: Path) -> SavedPlan:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanFileError(f"{path}: not a readable plan file ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise PlanFileError(f"{path}: not a plan file written by `npuctl plan -out`")
    if data.get("format_version") != FORMAT_VERSION:
        raise PlanFileError(
            f"{path}: plan file format {data.get('format_version')}, this npuctl reads {FORMAT_VERSION}"
        )
    try:
        return SavedPlan(
            [
                PlannedSpec(
                    s["name"],
                    s["file"],
                    s["spec"],
                    s["lock_digest"],
                    s["inputs"],
                    [PlannedStage(**st) for st in s["stages"]],
                )
                for s in data["specs"]
            ]
        )
    except (KeyError, TypeError) as exc:
        raise PlanFileError(f"{path}: malformed plan file ({exc})") from exc


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)


def stale(ws: Workspace, saved: SavedPlan, specs: list[LoadedSpec], results: list[SpecResult]) -> str | None:
    """The first difference between the saved plan and the plan now, as one line; None when there is
    none. `specs` and `results` are the re-loaded specs and their plan now; a planned spec that did not
    load is a difference too."""
    now = {spec.name: (spec, result) for spec, result in zip(specs, results, strict=True)}
    for before in saved.specs:
        if before.name not in now:
            return f"{before.file}: spec {before.name!r} no longer loads"
        spec, result = now[before.name]
        changed = keys.diff(before.spec, spec.field(""))
        if changed:
            path, old, new = changed[0]
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            return f"{before.file}: {path} changed: {_shown(old)} -> {_shown(new)}{more}"
        if _lock_digest(spec.path) != before.lock_digest:
            return f"{_relative(Layout.lock_file(spec.path), ws.layout.root)}: the lock file changed"
        current = planned(ws, spec, result)
        for name in sorted(set(before.inputs) | set(current.inputs)):
            if before.inputs.get(name) != current.inputs.get(name):
                variant, _, what = name.partition("/")
                return f"{before.name}: input {what} ({variant}) changed: its content digest differs"
        if current.stages != before.stages:
            then = {(s.variant, s.stage): s for s in before.stages}
            for stage in current.stages:
                old_stage = then.get((stage.variant, stage.stage))
                if old_stage != stage:
                    was = f"{old_stage.action} {(old_stage.key or '-')[:12]}" if old_stage else "absent"
                    return (
                        f"{before.name}: {stage.variant}/{stage.stage} was planned as {was}, "
                        f"now {stage.action} {(stage.key or '-')[:12]} (the toolchain or the state changed)"
                    )
            return f"{before.name}: its stages changed"
    return None
