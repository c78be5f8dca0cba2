"""The one interface between the engine and the toolchains.

The engine hands a stage exactly the spec fields that went into its build key (`StageRequest.config`),
so a stage cannot depend on anything the key does not cover. A backend knows its toolchain and the
catalog; it never sees git, the store or the spec file itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from backends.catalog import Target
from backends.sdk.registration import Registration

STAGES: tuple[str, ...] = ("import", "check", "rewrite", "preprocess", "quantize", "compile", "evaluate")


@dataclass(frozen=True)
class StageRequest:
    """Everything one stage run may read."""

    stage: str
    target: Target
    config: Mapping[str, Any]
    """The spec fields this stage reads, by dotted path (e.g. "quantization.mode"); exactly its key's fields."""
    inputs: Mapping[str, Path]
    """Named input files: earlier stages' artifacts ("model", "float_model", "placement") and data folders."""
    workdir: Path
    """A fresh scratch folder; artifacts are written here and moved into the store by the engine."""
    log: Path
    """The stage's full log; the engine prints its path when the stage fails."""


@dataclass
class StageOutput:
    """What a stage produced: files, plus JSON facts (placement, measurements) for records and lock files."""

    artifacts: dict[str, Path] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    """One line for the user, e.g. "identity: no preprocess section"."""


@runtime_checkable
class StageImpl(Protocol):
    """One stage's implementation. Its key identity (name, version) is its registration's
    (backends.sdk.registration), never read from the object."""

    stage: str

    def fingerprint(self) -> dict[str, str]:
        """Versions of the tools this implementation uses (e.g. {"onnx": "1.23.2"}); read without importing
        them (importlib.metadata), because plan computes keys without running anything. The key takes
        its registration's recipe instead when it has one (a test keeps the two equal)."""
        ...

    def run(self, request: StageRequest) -> StageOutput: ...


class StageLog:
    """The stage's log file (StageRequest.log), emptied when the stage starts; the engine prints its path
    when a stage fails. Call it with one message per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def __call__(self, message: str) -> None:
        with self.path.open("a") as fh:
            fh.write(message.rstrip("\n") + "\n")


@runtime_checkable
class Backend(Protocol):
    """A toolchain adapter. Registered by name in backends.registry, constructed lazily."""

    name: str
    stages: Mapping[str, Registration]
    """The stages it implements itself, by stage name; the others are the shared ONNX passes'."""

    def fingerprint(self) -> dict[str, str]:
        """Toolchain versions that go into the keys of the stages this backend implements."""
        ...

    def options_schema(self) -> dict[str, Any]:
        """JSON Schema for `compile.options`."""
        ...

    def missing_toolchain(self) -> str | None:
        """None when usable; otherwise one line saying what to install."""
        ...


SPEC_ERRORS = "spec_errors"
"""Optional Backend method `spec_errors(spec: dict, target: Target) -> list[(field, message)]`: settings
of the spec section (plain data) the toolchain cannot build, which `validate` reports at their line
instead of apply failing later."""


SPEC_NEEDS = "spec_needs"
"""Optional Backend attribute `spec_needs: tuple[SpecNeed, ...]`: spec fields its stages cannot run
without although the schema lets them be unset."""


@dataclass(frozen=True)
class SpecNeed:
    """A spec field a stage of a backend cannot run without, where the schema lets it be unset.

    Declared once, on the backend (`spec_needs`), and read three ways: `validate` reports a spec that
    lacks it at the field (no build needed to find out), `init` writes a placeholder for it, and the
    stage raises `message` should it run without it all the same."""

    field: str
    """The dotted field under `spec:` (evaluate.data)."""
    stage: str
    why: str
    """What the stage does with it, or why it has no fallback."""
    placeholder: str
    """The value `npuctl init` writes (marked FIXME), relative to the spec file."""
    when: tuple[str, tuple[Any, ...]] | None = None
    """(dotted field, values): the need holds only while that field has one of these values (with
    its default filled in, as in a validated spec)."""

    @property
    def message(self) -> str:
        return f"{self.stage} needs {self.field}: {self.why}"

    def holds(self, spec: Mapping[str, Any]) -> bool:
        """Whether the need applies to this `spec:` section (plain data, defaults filled in)."""
        if self.when is None:
            return True
        field, values = self.when
        return field_value(spec, field) in values

    def unmet(self, spec: Mapping[str, Any]) -> bool:
        return self.holds(spec) and field_value(spec, self.field) is None


def field_value(spec: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted field of plain spec data; None where a part is absent."""
    node: Any = spec
    for key in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
