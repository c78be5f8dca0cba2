"""Which files a spec reads, and which specs a changed path affects.

A spec reads its own file, every `extends` base, and what each of its path fields names (the fields
declared on the spec models, reconciler.spec.pathfields); folders are watched recursively. Paths are absolute and resolved, like the paths watchdog reports for the resolved
folders it watches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.spec import LoadedSpec, SpecErrors, model_file, resolve_path
from reconciler.spec.pathfields import named

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Inputs:
    files: frozenset[Path]
    """Watched as single files (spec, bases, model, labels, charset)."""
    trees: frozenset[Path]
    """Watched recursively (data folders)."""


def _model(spec: LoadedSpec, root: Path) -> Path | None:
    try:
        return model_file(spec, root)
    except SpecErrors:
        path = spec.field("model.path")
        if spec.field("model.package") is not None or not isinstance(path, str) or os.path.isabs(path):
            return None
        return (spec.path.parent / path).resolve()  # missing for now: watch for it to appear


def spec_inputs(spec: LoadedSpec, root: Path) -> Inputs:
    """The spec's files and what its path fields name; a folder (existing) is a tree, anything else a
    file, so a data folder that does not exist yet is noticed when it appears."""
    files = {Path(p).resolve() for p in spec.sources}
    trees: set[Path] = set()
    for path_field, value in named(spec.spec_json):
        if path_field.package is not None:
            path = _model(spec, root)
        else:
            try:
                path = resolve_path(spec, value, root, path_field.dotted)
            except SpecErrors:
                continue
        if path is not None:
            (trees if path.is_dir() else files).add(path)
    return Inputs(frozenset(files), frozenset(trees))


def is_spec_candidate(path: Path) -> bool:
    """A file that may be a spec: YAML, not hidden, not a lock file."""
    return path.suffix in SPEC_SUFFIXES and not path.name.startswith(".")


@dataclass
class InputIndex:
    """Reverse index: watched path -> the spec files that read it."""

    spec_dirs: frozenset[Path] = frozenset()
    """Folders named on the command line: a new YAML file appearing there is a new spec."""
    spec_files: frozenset[Path] = frozenset()
    """Spec files named on the command line: watched even while missing."""
    by_spec: dict[Path, Inputs] = field(default_factory=dict)

    def put(self, spec_file: Path, inputs: Inputs) -> None:
        self.by_spec[spec_file] = inputs

    def drop(self, spec_file: Path) -> None:
        self.by_spec.pop(spec_file, None)

    def affected(self, changed: set[Path]) -> set[Path]:
        """The spec files a set of changed paths concerns (including new or deleted spec files)."""
        out: set[Path] = set()
        for path in changed:
            if path in self.spec_files or (path.parent in self.spec_dirs and is_spec_candidate(path)):
                out.add(path)
            for spec_file, inputs in self.by_spec.items():
                if path in inputs.files or any(path == t or t in path.parents for t in inputs.trees):
                    out.add(spec_file)
        return out

    def folders(self) -> dict[Path, bool]:
        """Folder -> recursive, for the observer: parents of watched files, data trees, spec folders."""
        out: dict[Path, bool] = {d: False for d in self.spec_dirs}
        for file in self.spec_files:
            out.setdefault(file.parent, False)
        for inputs in self.by_spec.values():
            for file in inputs.files:
                out.setdefault(file.parent, False)
            for tree in inputs.trees:
                out[tree] = True
        return out
