"""Checking many specs: one broken spec never stops the others, and names must be unique."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.spec._discover import discover_with_errors
from reconciler.spec._errors import SpecError, display_path
from reconciler.spec._load import LoadedSpec, attempt
from reconciler.spec._semantic import semantic_errors
from reconciler.spec._yaml import Flat


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
    """A report per spec file under `paths`, with schema and (if `semantic`) semantic errors.

    A `metadata.name` claimed by two specs is an error in both, each naming the other's file and line,
    so neither is built: a new spec can never take over another's name, heads and ledger. Specs beside
    an explicitly named file count too (watch applies one file at a time).
    """
    files, missing = discover_with_errors(paths, root)
    reports = [SpecReport(error.file, None, None, (error,)) for error in missing]
    attempts = {file: _attempt(file, root) for file in files}
    claims = _claims(attempts)
    for file in _siblings(paths, files, root):
        for claimed, where in _claims({file: _attempt(file, root)}).items():
            claims.setdefault(claimed, []).extend(where)
    for file, (spec, flat, errors) in attempts.items():
        name = _name(flat.data if flat is not None else None)
        if spec is not None:
            if semantic:
                errors = _semantic(spec, root)
            others = [w for w in claims.get(spec.name, []) if w.file != file]
            if others:
                listed = ", ".join(f"{display_path(w.file)}:{w.line}" for w in others)
                message = f"name {spec.name!r} is also claimed by {listed}: neither spec is built"
                errors = [_error_at(spec, ("metadata", "name"), message), *errors]
        reports.append(SpecReport(file, name, spec, tuple(errors)))
    return reports


def _attempt(file: Path, root: Path) -> tuple[LoadedSpec | None, Flat | None, list[SpecError]]:
    """`attempt`, with anything unforeseen turned into this file's error: one spec never stops the others."""
    try:
        return attempt(file, root)
    except Exception as exc:
        return None, None, [SpecError(file, 0, 0, "", f"cannot load: {type(exc).__name__}: {exc}")]


def _semantic(spec: LoadedSpec, root: Path) -> list[SpecError]:
    try:
        return semantic_errors(spec, root)
    except Exception as exc:
        return [SpecError(spec.path, 0, 0, "", f"cannot check: {type(exc).__name__}: {exc}")]


def _claims(
    attempts: dict[Path, tuple[LoadedSpec | None, Flat | None, list[SpecError]]],
) -> dict[str, list[SpecError]]:
    """name -> where each spec claims it (file, line, column of metadata.name), invalid specs too."""
    out: dict[str, list[SpecError]] = {}
    for file, (_spec, flat, _errors) in attempts.items():
        name = _name(flat.data if flat is not None else None)
        if name is None or flat is None:
            continue
        mark, _ = flat.nearest(("metadata", "name"))
        out.setdefault(name, []).append(SpecError(file, mark.line, mark.column, "metadata.name", name))
    return out


def _siblings(paths: Sequence[Path], files: list[Path], root: Path) -> list[Path]:
    """Spec files beside the explicitly named ones, not among `files`."""
    folders = {Path(p).absolute().parent for p in paths if not Path(p).is_dir()}
    if not folders:
        return []
    found, _ = discover_with_errors(sorted(folders), root)
    return [f for f in found if f not in set(files)]


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
