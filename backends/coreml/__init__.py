"""Apple Neural Engine backend through coremltools: a real ML Program `.mlpackage` built on Linux.

coremltools converts from PyTorch, so the prepared ONNX goes onnx2torch -> torch.jit.trace ->
ct.convert(mlprogram) in the managed coreml venv (`npuctl toolchain install coreml`; torch's CPU
build, no torchvision). Stages it implements itself:
- quantize: nothing is quantized in ONNX (onnx2torch cannot read Q/DQ nodes); the stage records the
  plan compile carries out, and refuses what cannot be built here (W8A8 needs Core ML's activation
  calibration, which runs only on macOS);
- compile: the .mlpackage (packed as a tar: it is a folder) with compute units and precision from
  `compile.options` / `quantization.mode` (fp16, or int8 weights through linear_quantize_weights for
  ptq), checked against ONNX Runtime through the traced PyTorch model it was converted from;
- evaluate: not run: Core ML prediction exists only on macOS/iOS, so every SLO stays unverified.
"""

from __future__ import annotations

from typing import Any

from backends.sdk.registration import Registration, by_stage

NAME = "coreml"
COMPUTE_UNITS = ("ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY")
OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "coreml compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "compute_units": {
            "enum": list(COMPUTE_UNITS),
            "default": "CPU_AND_NE",
            "description": "ct.ComputeUnit the model is saved with (CPU_AND_NE: the Neural Engine first).",
        },
        "compute_precision": {
            "enum": ["FLOAT16", "FLOAT32"],
            "description": "ct.precision (default FLOAT16: the Neural Engine computes in fp16).",
        },
        "deployment_target": {
            "enum": ["iOS16", "iOS17", "iOS18", "macOS13", "macOS14", "macOS15"],
            "default": "iOS17",
            "description": "minimum_deployment_target.",
        },
    },
}


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "quantize",
        name="backends.coreml.convert.CoreMlQuantize",
        version="1-coreml-plan",
        ref="backends.coreml.convert:CoreMlQuantize",
    ),
    Registration(
        "compile",
        name="backends.coreml.convert.CoreMlCompile",
        version="12-coremltools",
        ref="backends.coreml.convert:CoreMlCompile",
    ),
    Registration(
        "evaluate",
        name="backends.coreml.convert.CoreMlEvaluate",
        version="1",
        ref="backends.coreml.convert:CoreMlEvaluate",
    ),
)
"""The fingerprints are the managed environment's (read by the implementations)."""


class CoreMlBackend:
    name = NAME
    stages = STAGES
    evidence_here = "none: the .mlpackage is built here, Core ML runs it only on macOS/iOS (not run)"

    def fingerprint(self) -> dict[str, str]:
        from backends.coreml.convert import fingerprint

        return fingerprint()

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def spec_errors(self, spec: dict[str, Any], target: Any) -> list[tuple[str, str]]:
        """(field, message) for settings this toolchain cannot build, reported by `validate`: a model's
        own Q/DQ (the conversion reads the model through onnx2torch, which reads no Q/DQ nodes)."""
        if (spec.get("quantization") or {}).get("mode") != "qat":
            return []
        message = (
            f"qat is not built for {target.id}: Core ML's conversion (through onnx2torch) reads no Q/DQ "
            "nodes; give the float model with mode: ptq (Core ML's W8)"
        )
        return [("quantization.mode", message)]

    def missing_toolchain(self) -> str | None:
        from backends.sdk import toolchains

        if toolchains.python(toolchains.COREML) is None:
            return f"coremltools {toolchains.COREML.version} not installed: {toolchains.COREML.install_hint}"
        return None
