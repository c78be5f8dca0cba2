"""A stage implementation's registration: the one place its key identity is written.

A build key holds its implementation's name, version and toolchain fingerprint. Every backend
declares, for each stage it implements itself, one `Registration` (its `stages` table, in the
backend's light module; the shared ONNX passes' are in backends.passes), and everything else derives
from it: the registry resolves and imports the implementation through `ref`, `plan` reads the key
identity from it, and the engine runs what that identity names.

- `name` is the key's implementation name, a plain string: moving the class to another module does
  not move a key (the built-in names are the classes' original dotted paths).
- `version` enters the key: bump it when the output would change. The history of a version lives in
  git, not beside it.
- `fingerprint` says how to read the toolchain versions without importing the implementation, so a
  no-op plan imports no onnx, numpy or runtime; without it the implementation's own `fingerprint()`
  says (a managed environment, an SDK probe), at the cost of importing its module.

Importing this module imports no toolchain.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.sdk import dists

if TYPE_CHECKING:
    from backends.sdk.base import StageImpl


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Dist:
    """{prefix + dist: the installed version of distribution `dist`, or "missing"} (package metadata,
    nothing imported)."""

    dist: str
    prefix: str = ""

    def read(self) -> dict[str, str]:
        return {self.prefix + self.dist: dists.version(self.dist) or "missing"}


@dataclass(frozen=True)
class Call:
    """The dict a light function returns, its keys prefixed; `fn` is the function or its
    "module:function" (imported when read)."""

    fn: str | Callable[[], Mapping[str, str]]
    prefix: str = ""

    def read(self) -> dict[str, str]:
        found: Mapping[str, str] = (_resolve(self.fn) if isinstance(self.fn, str) else self.fn)()
        return {self.prefix + k: v for k, v in found.items()}


Part = Dist | Call
"""One part of a fingerprint recipe; a recipe's parts are merged in order."""


@dataclass(frozen=True)
class Registration:
    """One stage implementation: its key identity and where it is."""

    stage: str
    name: str
    """The key's implementation name; stable, whatever module the implementation moves to."""
    version: str
    """Enters the key: bump it when the output would change."""
    ref: str
    """"module:factory": the implementation's class, or a function returning the implementation;
    imported only when the stage runs (or its fingerprint has no recipe)."""
    fingerprint: tuple[Part, ...] | None = None
    """The toolchain versions read without importing the implementation; None: its `fingerprint()`."""
    entry: str | None = None
    """For a compile stage: the name of the artifact an app opens, when the stage writes several files
    of one type (vela's optimised `.tflite` beside the plain int8 one it was compiled from); None: the
    artifact named `model`, else the preferred file type (backends.passes.variants.entry_file)."""

    def load(self) -> StageImpl:
        """A fresh implementation object (importing its module)."""
        impl: StageImpl = _resolve(self.ref)()
        return impl

    def recipe_fingerprint(self) -> dict[str, str] | None:
        """The fingerprint from the recipe; None when there is none (ask the implementation)."""
        if self.fingerprint is None:
            return None
        out: dict[str, str] = {}
        for part in self.fingerprint:
            out.update(part.read())
        return out

    def identity(self) -> dict[str, Any]:
        """The key identity {"name", "version", "fingerprint"}."""
        found = self.recipe_fingerprint()
        fingerprint = found if found is not None else self.load().fingerprint()
        return {"name": self.name, "version": self.version, "fingerprint": fingerprint}


def by_stage(*registrations: Registration) -> dict[str, Registration]:
    """A backend's `stages` table: stage -> its registration (one per stage)."""
    table = {r.stage: r for r in registrations}
    if len(table) != len(registrations):
        raise ValueError("one registration per stage")
    return table
