"""Loading one spec: safe YAML -> `extends` merge -> path rebasing -> pydantic -> target check.

Every schema-level error of a spec is collected and raised together, each positioned in the file
(spec or base) where the offending value was written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import backends.catalog as catalog
from reconciler.spec._errors import SpecError, SpecErrors
from reconciler.spec._extends import rebase_paths, resolve
from reconciler.spec._messages import from_validation_error
from reconciler.spec._suggest import suggest
from reconciler.spec._yaml import Flat, Loc, Map, Mark, Scalar, flatten, read
from reconciler.spec.models import Deployment


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec (after `extends` merging), with where each of its values was written."""

    path: Path
    """Absolute path of the spec file."""
    deployment: Deployment
    sources: tuple[Path, ...]
    """The spec file and every file it extends (absolute), for watch mode."""
    flat: Flat | None = field(default=None, repr=False, compare=False)
    """The merged YAML document with positions; None for specs built in code."""

    @property
    def name(self) -> str:
        return self.deployment.metadata.name

    @property
    def target(self) -> str:
        return self.deployment.spec.target

    @cached_property
    def _spec_json(self) -> dict[str, Any]:
        return self.deployment.spec.model_dump(mode="json", by_alias=True, exclude_none=False)

    def field(self, dotted: str) -> Any:
        """JSON value of spec.<dotted> (e.g. "quantization.calibration.data"); None under a None parent.

        Keys may contain dots ("inputs.input.1"); KeyError for a field the spec does not have.
        """
        parts = dotted.split(".") if dotted else []
        return copy.deepcopy(_walk(self._spec_json, parts, dotted))

    def position(self, dotted: str, *, key: bool = False) -> tuple[Path, int, int]:
        """Best-effort (file, line, column) of spec.<dotted>: of its value, or of its key with key=True."""
        if self.flat is None:
            return self.path, 0, 0
        mark, _ = self.flat.nearest(self.loc(dotted), prefer_key=key)
        return mark.file, mark.line, mark.column

    def loc(self, dotted: str) -> Loc:
        """The document path of spec.<dotted>, matching keys that contain dots where present."""
        parts = dotted.split(".") if dotted else []
        loc: Loc = ("spec",)
        nodes = self.flat.nodes if self.flat is not None else {}
        i = 0
        while i < len(parts):
            for j in range(len(parts), i, -1):
                key = ".".join(parts[i:j])
                candidate: Loc = (*loc, int(key)) if key.isdigit() else (*loc, key)
                if candidate in nodes:
                    loc, i = candidate, j
                    break
            else:
                return (*loc, *parts[i:])
        return loc

    def error(self, dotted: str, message: str, *, key: bool = False) -> SpecError:
        """A SpecError at spec.<dotted>."""
        file, line, column = self.position(dotted, key=key)
        return SpecError(file, line, column, f"spec.{dotted}" if dotted else "spec", message)


def _walk(value: Any, parts: list[str], dotted: str) -> Any:
    if not parts:
        return value
    if value is None:
        return None
    if isinstance(value, dict):
        for j in range(len(parts), 0, -1):
            key = ".".join(parts[:j])
            if key in value:
                return _walk(value[key], parts[j:], dotted)
    if isinstance(value, list) and parts[0].isdigit() and int(parts[0]) < len(value):
        return _walk(value[int(parts[0])], parts[1:], dotted)
    raise KeyError(f"spec.{dotted}")


def load(path: Path, root: Path) -> LoadedSpec:
    """The validated spec in `path`; raises SpecErrors listing every problem found."""
    spec, _, errors = attempt(path, root)
    if spec is None:
        raise SpecErrors(errors)
    return spec


def attempt(path: Path, root: Path) -> tuple[LoadedSpec | None, Flat | None, list[SpecError]]:
    """Like `load`, but also returns the merged document when validation fails (for its name)."""
    path = Path(path).resolve()
    try:
        tree = read(path)
        _check_kind(tree, path)
        merged, sources = resolve(path, tree, root)
    except SpecErrors as exc:
        return None, None, exc.errors
    flat = flatten(merged)
    rebase_paths(flat, path)
    errors: list[SpecError] = []
    deployment: Deployment | None = None
    try:
        deployment = Deployment.model_validate(flat.data, strict=True)
    except ValidationError as exc:
        errors.extend(from_validation_error(exc, flat))
    errors.extend(_target_errors(flat))
    if errors or deployment is None:
        return None, flat, sorted(errors, key=lambda e: (e.file != path, *e.sort_key()))
    return LoadedSpec(path, deployment, sources, flat), flat, []


def _check_kind(tree: Any, path: Path) -> None:
    if not isinstance(tree, Map):
        mark: Mark = tree.mark
        message = "a spec must be a mapping: apiVersion, kind, metadata, spec"
        raise SpecErrors([SpecError(path, mark.line, mark.column, "", message)])
    kind = tree.entries.get("kind")
    if kind is not None and isinstance(kind[1], Scalar) and kind[1].value == "DeploymentBase":
        mark = kind[1].mark
        message = "a DeploymentBase is a partial spec, only valid as the base of another spec's `extends`"
        raise SpecErrors([SpecError(path, mark.line, mark.column, "kind", message)])


def _target_errors(flat: Flat) -> list[SpecError]:
    node = flat.nodes.get(("spec", "target"))
    if not isinstance(node, Scalar) or not isinstance(node.value, str):
        return []
    known = sorted(catalog.targets())
    if node.value in known:
        return []
    hint = suggest(node.value, known, "known targets", limit=40)
    message = f"unknown target {node.value!r}{hint} (`npuctl targets` lists them)"
    return [SpecError(node.mark.file, node.mark.line, node.mark.column, "spec.target", message)]
