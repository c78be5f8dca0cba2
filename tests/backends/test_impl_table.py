"""backends.impl_table against the real implementation classes: names, versions and fingerprints.

The table lets plan compute keys without importing implementation modules; this test is what keeps
it true. Every built-in backend's every stage is resolved the slow way (importing the class) and
compared with what the table says, including which stages a backend implements itself.
"""

from __future__ import annotations

import pytest

from backends import impl_table, registry
from backends.onnx import shared_implementation
from reconciler.engine.stages import STAGES


def _real(backend: str, stage: str) -> tuple[object, bool] | None:
    impl = registry.backend(backend).implementation(stage)
    if impl is not None:
        return impl, True
    shared = shared_implementation(stage)
    return (shared, False) if shared is not None else None


@pytest.mark.parametrize("backend", sorted(registry.BUILTIN))
def test_table_matches_every_builtin_implementation(backend: str) -> None:
    for stage in (s.name for s in STAGES):
        real = _real(backend, stage)
        listed = impl_table.entry(backend, stage)
        if real is None:
            assert listed is None, f"{backend}/{stage}: the table lists an implementation that does not exist"
            continue
        assert listed is not None, f"{backend}/{stage}: implemented but not in backends.impl_table"
        impl, own = real
        (name, recipe), listed_own = listed
        assert listed_own == own, f"{backend}/{stage}: own implementation or shared pass?"
        assert name == f"{type(impl).__module__}.{type(impl).__qualname__}"
        version = impl_table.literal_version(name)
        assert version in (None, impl.version), f"{backend}/{stage}: the source says {version}"  # type: ignore[attr-defined]
        if recipe is not None:
            assert impl_table.fingerprint(recipe) == impl.fingerprint(), f"{backend}/{stage}"  # type: ignore[attr-defined]


def test_static_info_is_what_the_import_gives() -> None:
    from backends.catalog import targets

    cpu = targets()["cpu"]
    for stage in (s.name for s in STAGES):
        info = registry.static_info(cpu, stage)
        if stage == "verify":
            continue
        assert info is not None, f"{stage}: the cpu chain imports no implementation module to plan"
        impl = registry.implementation(cpu, stage)
        assert info == {
            "name": f"{type(impl).__module__}.{type(impl).__qualname__}",
            "version": impl.version,
            "fingerprint": impl.fingerprint(),
        }
