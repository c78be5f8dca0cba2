"""Checking many specs: one broken spec never stops the others, and names must be unique."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from backends.sdk import pathpolicy
from reconciler.spec._cache import SpecCache
from reconciler.spec._cached import from_cache, mark_model_checked, model_checked, remember
from reconciler.spec._discover import discover_with_errors
from reconciler.spec._errors import SpecError, display_path
from reconciler.spec._load import LoadedSpec, attempt
from reconciler.spec._semantic import Passed, data_errors, model_errors, ordered


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


def check(
    paths: Sequence[Path], root: Path, semantic: bool = True, siblings: bool = True, cached: bool = True
) -> list[SpecReport]:
    """A report per spec file under `paths`, with schema and (if `semantic`) semantic errors.

    A `metadata.name` claimed by two specs is an error in both, each naming the other's file and line,
    so neither is built: a new spec can never take over another's name, heads and ledger. Specs beside
    an explicitly named file count too (watch applies one file at a time). Specs unchanged since they
    last validated come from the cache (reconciler.spec._cache), their data folders checked again.
    With `siblings` False only the named files' names are compared: the caller compares them with
    the others' (a partial replay, which knows the names of the specs it did not read). With `cached`
    False the cache is neither read nor written: a caller that knows every named file changed since
    (the same partial replay) saves reading and rewriting every other spec's entry.
    """
    with pathpolicy.remembered():
        return _check(paths, root, semantic, siblings, cached)


def _check(
    paths: Sequence[Path], root: Path, semantic: bool, siblings: bool, cached: bool
) -> list[SpecReport]:
    read_ns = time.time_ns()
    cache = SpecCache(root if cached else None)
    files, missing = discover_with_errors(paths, root, lambda path: cache.get(path) is not None)
    reports = [SpecReport(error.file, None, None, (error,)) for error in missing]
    attempts = {file: _attempt(file, root, cache) for file in files}
    claims = _claims(attempts.values())
    passed: Passed = set()
    for file in _siblings(paths, files, root) if siblings else []:
        for claimed, where in _claims([_attempt(file, root, cache)]).items():
            claims.setdefault(claimed, []).extend(where)
    for file, tried in attempts.items():
        spec, errors = tried.spec, tried.errors
        if spec is not None:
            spec.read_ns = read_ns
            if semantic:
                errors = _semantic(spec, root, cache, passed)
            same = str(file)  # strings: cheaper to compare than paths, a thousand times a run
            others = [w for w in claims.get(spec.name, []) if str(w.file) != same]
            if others:
                listed = ", ".join(f"{display_path(w.file)}:{w.line}" for w in others)
                message = f"name {spec.name!r} is also claimed by {listed}: neither spec is built"
                errors = [_error_at(spec, ("metadata", "name"), message), *errors]
        reports.append(SpecReport(file, tried.name, spec, tuple(errors)))
    cache.save()
    return reports


@dataclass(frozen=True)
class _Attempt:
    spec: LoadedSpec | None
    name: str | None
    name_at: tuple[Path, int, int] | None
    """Where metadata.name is written (file, line, column)."""
    errors: list[SpecError]


def _attempt(file: Path, root: Path, cache: SpecCache) -> _Attempt:
    """The spec from the cache, else `attempt`, with anything unforeseen turned into this file's error:
    one spec never stops the others."""
    hit = from_cache(cache, file, root)
    if hit is not None:
        return _Attempt(hit[0], hit[0].name, hit[1], [])
    try:
        spec, flat, errors = attempt(file, root)
    except Exception as exc:
        return _Attempt(
            None, None, None, [SpecError(file, 0, 0, "", f"cannot load: {type(exc).__name__}: {exc}")]
        )
    name = _name(flat.data if flat is not None else None)
    name_at: tuple[Path, int, int] | None = None
    if flat is not None and name is not None:
        mark, _ = flat.nearest(("metadata", "name"))
        name_at = (mark.file, mark.line, mark.column)
    if spec is not None and name_at is not None:
        remember(cache, spec, name_at)
    return _Attempt(spec, name, name_at, errors)


def _semantic(spec: LoadedSpec, root: Path, cache: SpecCache, passed: Passed) -> list[SpecError]:
    try:
        errors = data_errors(spec, root, passed)
        if not model_checked(cache, spec):
            found = model_errors(spec, root)
            if not found:
                mark_model_checked(cache, spec)
            errors += found
        return ordered(spec, errors)
    except Exception as exc:
        return [SpecError(spec.path, 0, 0, "", f"cannot check: {type(exc).__name__}: {exc}")]


def _claims(attempts: Iterable[_Attempt]) -> dict[str, list[SpecError]]:
    """name -> where each spec claims it (file, line, column of metadata.name), invalid specs too."""
    out: dict[str, list[SpecError]] = {}
    for tried in attempts:
        if tried.name is None or tried.name_at is None:
            continue
        file, line, column = tried.name_at
        out.setdefault(tried.name, []).append(SpecError(file, line, column, "metadata.name", tried.name))
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
