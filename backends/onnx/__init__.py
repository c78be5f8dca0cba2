"""ONNX passes shared by every ONNX-based backend: import, check, rewrite, preprocess, quantize.

A backend that implements one of these stages itself (RKNN quantizes inside its own build) overrides
the shared pass; everything else starts from here. Modules are imported only when their stage runs.
"""

from __future__ import annotations

import importlib

from backends.base import StageImpl

_SHARED: dict[str, str] = {
    "import": "backends.onnx.importer:ImportPass",
    "check": "backends.onnx.check:CheckPass",
    "rewrite": "backends.onnx.rewrite:RewritePass",
    "preprocess": "backends.onnx.preprocess:PreprocessPass",
    "quantize": "backends.onnx.quantize:QuantizePass",
}


def shared_implementation(stage: str) -> StageImpl | None:
    """The shared pass for `stage`, or None (compile and evaluate are always the backend's own)."""
    ref = _SHARED.get(stage)
    if ref is None:
        return None
    module, _, attr = ref.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return None
        raise
    impl: StageImpl = cls()
    return impl
