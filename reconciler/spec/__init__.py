"""Deployment specs: the models, the safe loader with exact error locations, and semantic checks.

Public surface used by the engine and the CLI (implemented in the private modules of this package):

- `SpecError`: one problem, rendered as `file:line:col: field.path: message`; `SpecErrors`: the
  exception carrying several of them (`.errors`).
- `LoadedSpec`: a validated spec (after `extends` merging) with its source file(s); `.name`, `.target`,
  `.field(dotted)` (JSON value of spec.<dotted>), `.position(dotted)` (file, line, column),
  `.error(dotted, message)` (a SpecError at that field).
- `discover(paths, root) -> list[Path]`: the spec files under the given files/directories (directories
  non-recursively; `kind: DeploymentBase` files and lock files excluded).
- `load(path, root) -> LoadedSpec`: one spec, schema-checked; raises SpecErrors with every problem.
- `load_all(paths, root) -> tuple[list[LoadedSpec], list[SpecError]]`: every spec, every error; one broken
  spec never stops the others.
- `semantic_errors(spec, root) -> list[SpecError]`: checks against the files and the real ONNX graph.
- `check(paths, root) -> list[SpecReport]`: schema + semantic checks per spec file (what `npuctl validate`
  runs).
- `resolve_path(spec, relative, root, field) -> Path`: a spec-relative path, confined to the repository.
- `model_file(spec, root) -> Path`: the model file (spec-relative or inside an installed package).
- `reconciler.spec.pathfields`: which spec fields name a file or folder, declared once with `SpecPath`
  on the models: `PATH_FIELDS` (each a `PathField`: dotted, kind, input, package), `named(spec_json)`.
- `model_summary(path, root) -> ModelSummary`: inputs (with dynamic dims), nodes and sha256 of an ONNX
  file, cached under .npuctl/cache/onnx-summary/; raises ModelError for a file that is not ONNX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reconciler.spec._check import SpecReport, check, load_all
    from reconciler.spec._discover import discover
    from reconciler.spec._errors import SpecError, SpecErrors
    from reconciler.spec._load import LoadedSpec, load
    from reconciler.spec._paths import model_file, resolve_path
    from reconciler.spec._semantic import semantic_errors
    from reconciler.spec._summary import InputInfo, ModelError, ModelSummary
    from reconciler.spec._summary import summary as model_summary

_HOMES: dict[str, tuple[str, str]] = {
    "SpecReport": ("_check", "SpecReport"),
    "check": ("_check", "check"),
    "load_all": ("_check", "load_all"),
    "discover": ("_discover", "discover"),
    "SpecError": ("_errors", "SpecError"),
    "SpecErrors": ("_errors", "SpecErrors"),
    "LoadedSpec": ("_load", "LoadedSpec"),
    "load": ("_load", "load"),
    "model_file": ("_paths", "model_file"),
    "resolve_path": ("_paths", "resolve_path"),
    "semantic_errors": ("_semantic", "semantic_errors"),
    "InputInfo": ("_summary", "InputInfo"),
    "ModelError": ("_summary", "ModelError"),
    "ModelSummary": ("_summary", "ModelSummary"),
    "model_summary": ("_summary", "summary"),
}
"""Public name -> (the private module defining it, its name there). Loaded on first use: a command
that needs one module of the package (push and pull find spec files, nothing more) does not import
the loader, the checks and their dependencies."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home[0]}"), home[1])
    globals()[name] = value
    return value


__all__ = [
    "InputInfo",
    "LoadedSpec",
    "ModelError",
    "ModelSummary",
    "SpecError",
    "SpecErrors",
    "SpecReport",
    "check",
    "discover",
    "load",
    "load_all",
    "model_file",
    "model_summary",
    "resolve_path",
    "semantic_errors",
]
