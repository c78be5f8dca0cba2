"""Backends by name, constructed lazily; third parties register through the `npuctl.backends` entry point.

A backend lists the stages it implements itself in its `stages` table (backends.sdk.registration); the
others fall back to the shared ONNX passes (backends.passes.SHARED), which every ONNX-based toolchain
can start from. compile and evaluate have no shared fallback. A stage's key identity and the
implementation that runs both come from the one registration `registration` picks.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from functools import cache
from typing import Any

from backends.catalog import Target
from backends.sdk.base import Backend, StageImpl
from backends.sdk.errors import ToolchainMissing, UnsupportedStage
from backends.sdk.registration import Registration

BUILTIN: dict[str, str] = {
    "onnxruntime": "backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "backends.openvino:OpenVinoBackend",
    "rknn": "backends.rknn:RknnBackend",
    "qnn": "backends.qnn:QnnBackend",
    "cann": "backends.cann:CannBackend",
    "ethos-u": "backends.ethosu:EthosUBackend",
    "mediatek": "backends.mediatek:MediaTekBackend",
    "coreml": "backends.coreml:CoreMlBackend",
}
"""name -> "module:Class"; modules are imported only when the backend is first used."""


def _load(name: str, ref: str) -> type:
    module, _, attr = ref.partition(":")
    try:
        loaded: type = getattr(importlib.import_module(module), attr)
        return loaded
    except (ImportError, AttributeError) as exc:
        raise UnsupportedStage(f"backend {name!r} could not be loaded from {ref}: {exc}") from exc


def known() -> dict[str, str]:
    names = dict(BUILTIN)
    for name, value in _plugins(tuple(sys.path)):
        names.setdefault(name, value)
    return names


@cache
def _plugins(search_path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Entry points, read once per import path: scanning every installed distribution's metadata
    costs ~25 ms, and validation asks once per spec."""
    from importlib.metadata import entry_points

    return tuple((ep.name, ep.value) for ep in entry_points(group="npuctl.backends"))


@cache
def backend(name: str) -> Backend:
    """The backend registered under `name`; UnsupportedStage when no such backend exists."""
    refs = BUILTIN if name in BUILTIN else known()  # built-in names win: no metadata scan for them
    if name not in refs:
        raise UnsupportedStage(f"no backend named {name!r} (known: {', '.join(sorted(refs))})")
    instance: Backend = _load(name, refs[name])()
    if not isinstance(getattr(instance, "stages", None), Mapping):
        raise UnsupportedStage(
            f"backend {name!r} from {refs[name]} declares no `stages` table (backends.sdk.registration; "
            "see docs/plugins.md)"
        )
    return instance


def backend_for(target: Target, override: str | None = None) -> Backend:
    return backend(override or target.backend)


def registration(target: Target, stage: str, override: str | None = None) -> Registration:
    """The registration (backends.sdk.registration) of what builds `stage` for `target`: the backend's
    own, else the shared ONNX pass's.

    Raises UnsupportedStage when neither the backend nor the shared passes implement it, and
    ToolchainMissing (with the install line) when the backend's toolchain is absent.
    """
    from backends.passes import SHARED

    try:
        chosen: Backend | None = backend_for(target, override)
    except UnsupportedStage:
        if stage in ("compile", "evaluate"):
            raise
        chosen = None  # no adapter for this target yet: the shared ONNX passes still run
    own = chosen.stages.get(stage) if chosen is not None else None
    if own is not None and chosen is not None:
        missing = chosen.missing_toolchain()
        if missing:
            raise ToolchainMissing(missing)
        return own
    shared = SHARED.get(stage)
    if shared is None:
        name = chosen.name if chosen is not None else (override or target.backend)
        raise UnsupportedStage(f"backend {name!r} implements no {stage} stage for target {target.id!r}")
    return shared


def implementation(target: Target, stage: str, override: str | None = None) -> StageImpl:
    """The implementation of `stage` for `target`, imported now (raises as `registration`)."""
    return registration(target, stage, override).load()


def identity(target: Target, stage: str, override: str | None = None) -> dict[str, Any]:
    """The key identity ({"name", "version", "fingerprint"}) of what `implementation` would return;
    imports the implementation's module only when its fingerprint has no recipe. Raises as
    `registration`."""
    return registration(target, stage, override).identity()


def describe(target: Target) -> dict[str, str]:
    """What builds `target` here, for `npuctl targets`: the backend, its toolchain's state, and the
    evidence its measurements can carry on this machine (a backend's `evidence_here`)."""
    name = target.backend
    if name not in known():
        return {
            "backend": name,
            "toolchain": "no backend registered",
            "evidence": "none: validate rejects it",
        }
    try:
        chosen = backend(name)
    except UnsupportedStage as exc:
        return {"backend": name, "toolchain": str(exc), "evidence": "none"}
    missing = chosen.missing_toolchain()
    evidence = str(getattr(chosen, "evidence_here", "not declared by the backend"))
    return {"backend": name, "toolchain": missing or "ready", "evidence": evidence}
