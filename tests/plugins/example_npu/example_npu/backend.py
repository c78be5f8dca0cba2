"""The examplenpu backend: an adapter for the (example) example-n1 NPU.

A real plug-in wraps its vendor's SDK here. This example has no SDK, so its compiler and runtime are
ONNX Runtime's (it builds and measures for real on any machine), and it says so in `evidence_here`.
What it shows is the contract: a name, one registration per stage it implements (`STAGES`: the key's
name, version and fingerprint recipe, and where the implementation is), a backend fingerprint, an
options schema and `missing_toolchain`; the other stages fall back to npuctl's shared ONNX passes,
placement included, from the catalog's op table.
"""

from __future__ import annotations

from typing import Any

from backends.onnxruntime import STAGES as ORT
from backends.onnxruntime import OnnxRuntimeBackend
from backends.sdk.base import StageImpl, StageOutput, StageRequest
from backends.sdk.registration import Call, Registration, by_stage

SDK_VERSION = "0.1.0"
"""A real adapter reads its SDK's version (importlib.metadata, or the SDK's own version call)."""


def sdk_fingerprint() -> dict[str, str]:
    """The (example) SDK's version: in every key of the stages it runs, so an SDK upgrade rebuilds
    exactly those. Light: plan calls it without importing a runtime."""
    return {"example-npu-sdk": SDK_VERSION}


class WithSdk:
    """A stage of ONNX Runtime's run as the (example) SDK's. Module-level and plain, so the engine can
    send it to its child interpreter."""

    def __init__(self, impl: StageImpl) -> None:
        self.impl = impl
        self.stage = impl.stage

    def fingerprint(self) -> dict[str, str]:
        return {**self.impl.fingerprint(), **sdk_fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        return self.impl.run(request)


def quantize_stage() -> StageImpl:
    return WithSdk(ORT["quantize"].load())


def compile_stage() -> StageImpl:
    return WithSdk(ORT["compile"].load())


def evaluate_stage() -> StageImpl:
    return WithSdk(ORT["evaluate"].load())


def _registration(stage: str) -> Registration:
    """The stage as ONNX Runtime's registration says, plus the SDK: same version (its output is ONNX
    Runtime's), ONNX Runtime's fingerprint recipe with the SDK's version added."""
    return Registration(
        stage,
        name=f"example_npu.{stage}",
        version=ORT[stage].version,
        ref=f"example_npu.backend:{stage}_stage",
        fingerprint=(*(ORT[stage].fingerprint or ()), Call(sdk_fingerprint)),
    )


STAGES: dict[str, Registration] = by_stage(*(_registration(s) for s in ("quantize", "compile", "evaluate")))


class ExampleNpuBackend:
    name = "examplenpu"
    stages = STAGES
    evidence_here = "measured:host (example plug-in: ONNX Runtime stands in for the example-n1 SDK)"

    def __init__(self) -> None:
        self._ort = OnnxRuntimeBackend()

    def fingerprint(self) -> dict[str, str]:
        return {**self._ort.fingerprint(), **sdk_fingerprint()}

    def options_schema(self) -> dict[str, Any]:
        return {**self._ort.options_schema(), "title": "examplenpu compile.options"}

    def missing_toolchain(self) -> str | None:
        return self._ort.missing_toolchain()
