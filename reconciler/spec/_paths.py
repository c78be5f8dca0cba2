"""Paths named by a spec: relative to the spec file, confined to the repository (or to a package).

Which fields are paths is declared on the spec models (reconciler.spec.pathfields). A spec is untrusted
input, so every path it names is resolved (symlinks included) and must stay inside the repository root; a model shipped in an installed package must stay inside that package's
folder. The package is located with importlib's finders and never imported: a spec runs no code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from backends.sdk import pathpolicy
from reconciler.spec._errors import SpecError, SpecErrors

if TYPE_CHECKING:
    from reconciler.spec._load import LoadedSpec


def _error(spec: LoadedSpec, field: str, message: str, key: bool = False) -> SpecErrors:
    dotted = field.removeprefix("spec.")
    where, line, column = spec.position(dotted, key=key)
    return SpecErrors([SpecError(where, line, column, f"spec.{dotted}", message)])


def resolve_path(spec: LoadedSpec, relative: str, root: Path, field: str) -> Path:
    """`relative` resolved against the spec's folder, symlinks followed, required to stay inside `root`
    (backends.sdk.pathpolicy: no NUL, not absolute, no escape).

    `field` is the dotted spec field that holds the path (e.g. "quantization.calibration.data");
    errors name it and point at its position.
    """
    try:
        pathpolicy.check_text(relative)
        return pathpolicy.confine(spec.path.parent / relative, root, relative)
    except pathpolicy.PathRefused as exc:
        raise _error(spec, field, str(exc)) from None


def data_members(spec: LoadedSpec, folder: Path, root: Path, field: str) -> list[Path]:
    """The members of a data folder the spec names, each confined and a regular file (never opened)."""
    try:
        return pathpolicy.members(folder, root)
    except pathpolicy.PathRefused as exc:
        raise _error(spec, field, str(exc)) from None
    except OSError as exc:
        raise _error(spec, field, f"cannot list {folder}: {exc.strerror or exc}") from None


def package_folder(name: str) -> Path:
    """The folder of the installed top-level package `name`, found without importing it."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise LookupError(f"package {name!r} is not installed")
    locations = list(found.submodule_search_locations or [])
    if not locations:
        raise LookupError(f"{name!r} is a module, not a package folder")
    return Path(locations[0]).resolve()


def model_file(spec: LoadedSpec, root: Path) -> Path:
    """The model file: relative to the spec, or to the folder of the installed package `model.package`.

    Raises SpecErrors naming spec.model.path (or spec.model.package) when the path escapes its folder,
    the package is not installed, or the file does not exist.
    """
    model_path, package = spec.field("model.path"), spec.field("model.package")
    assert model_path is not None  # the model validator requires it
    if package is None:
        path = resolve_path(spec, model_path, root, "model.path")
    else:
        try:
            folder = package_folder(package)
        except LookupError as exc:
            raise _error(spec, "model.package", str(exc)) from None
        try:
            pathpolicy.check_text(model_path)
        except pathpolicy.PathRefused as exc:
            raise _error(spec, "model.path", str(exc).replace("spec file", "package")) from None
        path = pathpolicy.resolve(folder / model_path)
        if not pathpolicy.inside(path, folder):
            raise _error(spec, "model.path", f"{model_path!r} resolves outside the package folder {folder}")
    if not path.exists():
        raise _error(spec, "model.path", f"model file not found: {path}")
    try:
        pathpolicy.require_regular(path)
    except pathpolicy.PathRefused as exc:
        raise _error(spec, "model.path", str(exc)) from None
    return path
