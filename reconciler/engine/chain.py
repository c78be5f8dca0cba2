"""One spec and shape variant as a chain of stages, resolved as far as possible without running anything.

What is known before running (fields, file digests, the implementation and its fingerprint) is fixed
here; upstream artifact digests become known as the chain is walked (by plan from records, by apply
by building).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import registry
from backends.catalog import Target, targets
from backends.sdk import pathpolicy
from backends.sdk.base import StageImpl
from backends.sdk.errors import BackendError
from reconciler.engine import keys, world
from reconciler.engine.stages import STAGES, Stage
from reconciler.spec import LoadedSpec, SpecError, SpecErrors, model_file, resolve_path
from reconciler.spec.pathfields import PathField, value
from reconciler.state.hashcache import FileHasher

DEFAULT_VARIANT = "default"


@dataclass(frozen=True)
class Variant:
    name: str
    inputs: dict[str, list[int]]


def variants(spec: LoadedSpec) -> list[Variant]:
    """The default shapes, then one variant per `shape_variants` entry, named by its shapes."""
    base: dict[str, list[int]] = spec.field("inputs")
    out = [Variant(DEFAULT_VARIANT, base)]
    for override in spec.field("shape_variants") or []:
        merged = {**base, **override}
        name = ",".join(f"{k}={'x'.join(map(str, v))}" for k, v in sorted(override.items()))
        out.append(Variant(name, merged))
    return out


@dataclass
class StageSetup:
    stage: Stage
    config: dict[str, Any]
    files: dict[str, Path]
    file_digests: dict[str, str | None]
    active: bool
    impl_info: dict[str, Any] = field(default_factory=lambda: dict(keys.IMPL_IDENTITY))
    error: BackendError | None = None
    """Why the stage cannot run here (no implementation, toolchain missing), found before running."""
    upstream: dict[str, str] = field(default_factory=dict)
    """Input name -> artifact digest, filled while walking the chain."""
    override: str | None = None
    """compile.backend, when the spec names one."""

    def implementation(self, target: Target) -> StageImpl:
        """The implementation itself, imported only now that the stage is to run (its key identity came
        from the same registration)."""
        return registry.implementation(target, self.stage.name, self.override)

    def key_inputs(self, target: Target) -> dict[str, Any]:
        reads_target = "target" in self.stage.reads
        return keys.key_inputs(
            self.stage.name,
            self.impl_info,
            self.config,
            self.file_digests,
            self.upstream,
            target if reads_target and self.active else None,
        )


_implementation = world.implementation


def _with_runner(impl_info: dict[str, Any], evaluate: Any) -> dict[str, Any]:
    """A remote runner's identity (its interpreter, its options) is part of what evaluate measures on."""
    from backends.runners import key_identity

    runner = str((evaluate or {}).get("runner", "local"))
    identity = key_identity(runner) if runner != "local" else {}
    return {**impl_info, "runner": identity} if identity else impl_info


def _file_path(spec: LoadedSpec, root: Path, path_field: PathField, paths: dict[str, Path]) -> Path | None:
    """The file a path field names, confined to the repository (or its package); memoized, many specs
    share data."""
    named = value(spec.spec_json, path_field)
    if named is None:
        return None
    field_path = path_field.dotted
    memo = f"{spec.path.parent}\0{root}\0{field_path}\0{json.dumps(named, sort_keys=True)}"
    if memo not in paths:
        if path_field.package is not None:
            paths[memo] = model_file(spec, root)
        else:
            paths[memo] = resolve_path(spec, named, root, f"spec.{field_path}")
    return paths[memo]


def _spec_error(spec: LoadedSpec, field_path: str, message: str) -> SpecErrors:
    file, line, column = spec.position(field_path)
    return SpecErrors([SpecError(file, line, column, f"spec.{field_path}", message)])


def build_chain(spec: LoadedSpec, variant: Variant, root: Path, hasher: FileHasher) -> list[StageSetup]:
    """Resolve every stage of one variant. Raises SpecErrors for a missing or escaping input file."""
    target = targets()[spec.target]
    override = spec.field("compile.backend")
    chain = []
    for stage in STAGES:
        config = {
            path: (variant.inputs if path == "inputs" else spec.field(path))
            for path in stage.reads
            if path not in stage.when
        }
        conditional = {path: spec.field(path) for path in stage.when if path in stage.reads}
        config.update(
            {path: value for path, value in conditional.items() if stage.wants(path, {**config, path: value})}
        )
        active = stage.active(config)
        files: dict[str, Path] = {}
        digests: dict[str, str | None] = {}
        if active:
            for name, path_field in stage.files.items():
                if not stage.wants(name, config):
                    continue
                field_path = path_field.dotted
                path = _file_path(spec, root, path_field, hasher.resolved)
                if path is not None and not os.path.exists(path):
                    raise _spec_error(spec, field_path, f"{path} does not exist")
                try:
                    digests[name] = None if path is None else hasher.digest(path)
                except pathpolicy.PathRefused as exc:
                    raise _spec_error(spec, field_path, str(exc)) from exc
                except OSError as exc:
                    raise _spec_error(
                        spec, field_path, f"cannot read {exc.filename}: {exc.strerror}"
                    ) from exc
                if path is not None:
                    files[name] = path
        setup = StageSetup(stage, config, files, digests, active)
        if active:
            setup.impl_info, setup.error = _implementation(target, stage.name, override)
            setup.override = override
            if stage.name == "evaluate":
                setup.impl_info = _with_runner(setup.impl_info, config.get("evaluate"))
        chain.append(setup)
    return chain
