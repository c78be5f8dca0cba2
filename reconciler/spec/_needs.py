"""What a target's backend needs from a spec beyond the schema (backends.sdk.base.SpecNeed), asked of the
backend registry: `validate` reports an unmet need at its field, `init` writes a placeholder for each.
"""

from __future__ import annotations

from backends import catalog
from backends.sdk.base import SPEC_NEEDS, SpecNeed
from reconciler.spec._errors import SpecError
from reconciler.spec._load import LoadedSpec


def target_needs(target_id: str, backend: str | None = None) -> tuple[SpecNeed, ...]:
    """The needs declared by the backend that builds `target_id` (or `backend`, when the spec names
    one); none when the target or the backend is unknown (their own errors say so)."""
    from backends import registry
    from backends.sdk.errors import BackendError

    try:
        chosen = registry.backend(backend or catalog.target(target_id).backend)
    except (BackendError, KeyError, LookupError):
        return ()
    needs = getattr(chosen, SPEC_NEEDS, ())
    return tuple(n for n in needs if isinstance(n, SpecNeed))


def need_errors(spec: LoadedSpec) -> list[SpecError]:
    """An error at each field the spec's backend needs and the spec leaves unset (at the nearest
    section written, when the field is absent)."""
    section = spec.deployment.spec.model_dump(mode="json")
    needs = target_needs(spec.target, spec.deployment.spec.compile.backend)
    return [spec.error(n.field, n.message, key=True) for n in needs if n.unmet(section)]
