"""Checking many specs: one broken spec never stops the others, and names must be unique."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.spec._discover import discover_with_errors
from reconciler.spec._errors import SpecError, display_path
from reconciler.spec._load import LoadedSpec, attempt
from reconciler.spec._semantic import semantic_errors


@dataclass(frozen=True)
class SpecReport:
    """The outcome for one spec file."""

    file: Path
    name: str | None
    """metadata.name when it could be read, even from an invalid spec."""
    spec: LoadedSpec | None
    """The loaded spec when it passed the schema checks."""
    errors: tuple[SpecError, ...]

    @property
    def valid(self) -> bool:
        return self.spec is not None and not self.errors


def check(paths: Sequence[Path], root: Path, semantic: bool = True) -> list[SpecReport]:
    """A report per spec file under `paths`, with schema and (if `semantic`) semantic errors."""
    files, missing = discover_with_errors(paths, root)
    reports = [SpecReport(error.file, None, None, (error,)) for error in missing]
    owners: dict[str, Path] = {}
    for file in files:
        spec, flat, errors = attempt(file, root)
        name = _name(flat.data if flat is not None else None)
        if spec is not None:
            if semantic:
                errors = semantic_errors(spec, root)
            if spec.name in owners:
                message = f"name {spec.name!r} is already used by {display_path(owners[spec.name])}"
                errors = [_error_at(spec, ("metadata", "name"), message), *errors]
            else:
                owners[spec.name] = file
        reports.append(SpecReport(file, name, spec, tuple(errors)))
    return reports


def load_all(paths: Sequence[Path], root: Path) -> tuple[list[LoadedSpec], list[SpecError]]:
    """Every spec that passes the schema checks, and every error of the others."""
    reports = check(paths, root, semantic=False)
    specs = [r.spec for r in reports if r.spec is not None and r.valid]
    errors = [e for r in reports for e in r.errors]
    return specs, errors


def _error_at(spec: LoadedSpec, loc: tuple[str, ...], message: str) -> SpecError:
    if spec.flat is None:
        return SpecError(spec.path, 0, 0, ".".join(loc), message)
    mark, _ = spec.flat.nearest(loc)
    return SpecError(mark.file, mark.line, mark.column, ".".join(loc), message)


def _name(data: object) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
        name = data["metadata"].get("name")
        return name if isinstance(name, str) else None
    return None
