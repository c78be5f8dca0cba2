"""Loading one spec: safe YAML -> `extends` merge -> path rebasing -> pydantic -> target check.

Every schema-level error of a spec is collected and raised together, each positioned in the file
(spec or base) where the offending value was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import backends.catalog as catalog
from reconciler.spec._errors import SpecError, SpecErrors
from reconciler.spec._extends import rebase_paths, resolve
from reconciler.spec._suggest import suggest
from reconciler.spec._yaml import Flat, Loc, Map, Mark, Scalar, flatten, read

if TYPE_CHECKING:
    from reconciler.spec.models import Deployment


class LoadedSpec:
    """A validated spec (after `extends` merging), with where each of its values was written.

    Built by validation, or from the validated-spec cache (reconciler.spec._cache): then the pydantic
    model and the positions are rebuilt only when first asked for (an error to report, a semantic
    check), so an unchanged spec costs its stats and a lookup.
    """

    def __init__(
        self,
        path: Path,
        sources: tuple[Path, ...],
        spec_json: dict[str, Any],
        name: str,
        document: dict[str, Any],
        root: Path,
        deployment: Deployment | None = None,
        flat: Flat | None = None,
    ) -> None:
        self.path = path
        self.root = root
        """The repository root the spec's paths were confined to."""
        """Absolute path of the spec file."""
        self.sources = sources
        """The spec file and every file it extends (absolute), for watch mode."""
        self.document = document
        """The merged document, paths rebased, as validated."""
        self._spec_json = spec_json
        self._name = name
        self._deployment = deployment
        self._flat = flat
        self.read_ns: int | None = None
        """The moment before this spec's files were read (or found unchanged by their stats), set by
        validation: a cache that records what was computed from the spec measures its racy window from
        here, since an edit after it is not in what was computed."""

    @classmethod
    def validated(
        cls, path: Path, root: Path, deployment: Deployment, sources: tuple[Path, ...], flat: Flat
    ) -> LoadedSpec:
        spec_json = deployment.spec.model_dump(mode="json", by_alias=True, exclude_none=False)
        name = deployment.metadata.name
        return cls(path, sources, spec_json, name, flat.data, root, deployment, flat)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoadedSpec):
            return NotImplemented
        key = (self.path, self._name, self.sources, self._spec_json)
        return key == (other.path, other._name, other.sources, other._spec_json)

    def __hash__(self) -> int:
        return hash((self.path, self._name))

    def __repr__(self) -> str:
        return f"LoadedSpec({self._name!r}, {str(self.path)!r})"

    @property
    def deployment(self) -> Deployment:
        if self._deployment is None:
            from reconciler.spec.models import Deployment

            self._deployment = Deployment.model_validate(self.document, strict=True)
        return self._deployment

    @property
    def flat(self) -> Flat | None:
        """The merged YAML document with positions, re-read from the files when first needed."""
        if self._flat is None:
            try:
                self._flat = _merged(self.path, self.root)
            except SpecErrors:
                return None
        return self._flat

    @property
    def spec_json(self) -> dict[str, Any]:
        """spec: as JSON (pydantic's dump, defaults filled); shared, never to be modified."""
        return self._spec_json

    @property
    def name(self) -> str:
        return self._name

    @property
    def target(self) -> str:
        return str(self._spec_json["target"])

    def field(self, dotted: str) -> Any:
        """JSON value of spec.<dotted> (e.g. "quantization.calibration.data"); None under a None parent.

        Keys may contain dots ("inputs.input.1"); KeyError for a field the spec does not have. The
        value is shared by every caller (no copy): read it, never modify it.
        """
        parts = dotted.split(".") if dotted else []
        return _walk(self._spec_json, parts, dotted)

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
    from pydantic import ValidationError

    from reconciler.spec._messages import from_validation_error
    from reconciler.spec.models import Deployment

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
    return LoadedSpec.validated(path, root, deployment, sources, flat), flat, []


def _merged(path: Path, root: Path) -> Flat:
    """The merged document of `path` with positions (for a spec rebuilt from the cache)."""
    tree = read(path)
    merged, _ = resolve(path, tree, root)
    flat = flatten(merged)
    rebase_paths(flat, path)
    return flat


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
