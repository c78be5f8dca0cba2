"""The examplenpu backend: an adapter for the (example) example-n1 NPU.

A real plug-in wraps its vendor's SDK here. This example has no SDK, so its compiler and runtime are
ONNX Runtime's (it builds and measures for real on any machine), and it says so in `evidence_here`.
What it shows is the contract: a name, `serves`, a fingerprint that enters the build keys, an options
schema, `missing_toolchain`, and the stages it implements (the others fall back to npuctl's shared ONNX
passes, placement included, from the catalog's op table).
"""

from __future__ import annotations

from typing import Any

from backends.base import StageImpl, StageOutput, StageRequest
from backends.catalog import Target
from backends.onnxruntime import OnnxRuntimeBackend

SDK_VERSION = "0.1.0"
"""A real adapter reads its SDK's version (importlib.metadata, or the SDK's own version call)."""


class WithSdk:
    """A stage of ONNX Runtime's whose fingerprint also names the (example) SDK, so that an SDK upgrade
    changes the stage's build key and rebuilds exactly the stages it runs. Module-level and plain, so the
    engine can send it to its child interpreter."""

    def __init__(self, impl: StageImpl) -> None:
        self.impl = impl
        self.stage = impl.stage
        self.version = impl.version

    def fingerprint(self) -> dict[str, str]:
        return {**self.impl.fingerprint(), "example-npu-sdk": SDK_VERSION}

    def run(self, request: StageRequest) -> StageOutput:
        return self.impl.run(request)


class ExampleNpuBackend:
    name = "examplenpu"
    evidence_here = "measured:host (example plug-in: ONNX Runtime stands in for the example-n1 SDK)"

    def __init__(self) -> None:
        self._ort = OnnxRuntimeBackend()

    def serves(self, target: Target) -> bool:
        return target.backend == self.name

    def fingerprint(self) -> dict[str, str]:
        return {**self._ort.fingerprint(), "example-npu-sdk": SDK_VERSION}

    def options_schema(self) -> dict[str, Any]:
        return {**self._ort.options_schema(), "title": "examplenpu compile.options"}

    def missing_toolchain(self) -> str | None:
        return self._ort.missing_toolchain()

    def implementation(self, stage: str) -> StageImpl | None:
        impl = self._ort.implementation(stage)
        return WithSdk(impl) if impl is not None else None
