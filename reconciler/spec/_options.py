"""`compile`: the backend override must exist, and `compile.options` must match that backend's JSON Schema.

Only specs that set a backend or non-empty options pay for this: the registry, the backend module and
jsonschema are imported here, on demand (a backend module imports its toolchain only when it runs).
"""

from __future__ import annotations

from typing import Any

import backends.catalog as catalog
from reconciler.spec._errors import SpecError
from reconciler.spec._load import LoadedSpec
from reconciler.spec._suggest import suggest


def options_errors(spec: LoadedSpec) -> list[SpecError]:
    compile_ = spec.deployment.spec.compile
    if compile_.backend is None:
        missing = target_backend_error(spec)
        if missing is not None:
            return [missing]
    if compile_.backend is None and not compile_.options:
        return []
    from backends import registry
    from backends.sdk.errors import BackendError

    known = sorted(registry.known())
    if compile_.backend is not None and compile_.backend not in known:
        message = f"no backend named {compile_.backend!r}{suggest(compile_.backend, known, 'known backends')}"
        return [spec.error("compile.backend", message)]
    if not compile_.options:
        return []
    name = compile_.backend or catalog.target(spec.target).backend
    try:
        schema = registry.backend(name).options_schema()
    except BackendError as exc:
        message = f"cannot check the options of backend {name!r}: {exc}"
        return [spec.error("compile.options", message, key=True)]
    return _schema_errors(spec, name, schema, compile_.options)


def backend_spec_errors(spec: LoadedSpec) -> list[SpecError]:
    """What the spec's backend says it cannot build (its optional `spec_errors`, backends.sdk.base)."""
    section = spec.deployment.spec.model_dump(mode="json")
    found = refused(spec.target, section, spec.deployment.spec.compile.backend)
    return [spec.error(field, message) for field, message in found]


def refused(target_id: str, section: dict[str, Any], backend: str | None = None) -> list[tuple[str, str]]:
    """(field, message) for what the target's backend (or `backend`) cannot build of the spec section
    `section`, by its optional `spec_errors`; none for a backend that is not registered here (reported
    by options_errors)."""
    from backends import registry
    from backends.sdk.base import SPEC_ERRORS
    from backends.sdk.errors import BackendError

    target = catalog.target(target_id)
    try:
        check = getattr(registry.backend(backend or target.backend), SPEC_ERRORS, None)
    except BackendError:
        return []
    return list(check(section, target)) if check is not None else []


def target_backend_error(spec: LoadedSpec) -> SpecError | None:
    """The target's backend must exist here, so apply never fails on a missing adapter (`validate` does)."""
    from backends import registry
    from backends.sdk.errors import BackendError

    name = catalog.target(spec.target).backend
    if name not in registry.BUILTIN and name not in registry.known():  # no metadata scan for built-ins
        known = sorted(registry.known())
        message = (
            f"target {spec.target!r} has no backend here: its backend {name!r} is not registered "
            f"(known: {', '.join(known)}); set compile.backend to one of them"
        )
        return spec.error("target", message)
    try:
        registry.backend(name)
    except BackendError as exc:
        return spec.error("target", f"target {spec.target!r}: {exc}")
    return None


def _schema_errors(
    spec: LoadedSpec, backend: str, schema: dict[str, Any], options: dict[str, Any]
) -> list[SpecError]:
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = []
    for error in sorted(validator.iter_errors(options), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ".".join(str(p) for p in ("compile", "options", *error.absolute_path))
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = sorted((error.schema.get("properties") or {}).keys())
            for key in sorted(set(error.instance) - set(allowed)):
                message = f"unknown {backend} option {key!r}{suggest(key, allowed, 'allowed')}"
                errors.append(spec.error(f"{path}.{key}", message, key=True))
            continue
        errors.append(spec.error(path, f"{backend} option: {error.message}"))
    return errors
