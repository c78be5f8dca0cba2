"""Intel NPU backend through OpenVINO (+ NNCF for int8).

Stages it implements itself:
- check: the table placement, overridden by `core.query_model(model, "NPU")` when an NPU is present
  (the plugin's own answer wins; the report names its source);
- quantize: NNCF post-training quantization (`nncf.quantize` on the ONNX model, QDQ ONNX out) with
  `ignored_scope` built from the sensitive layers (names, patterns, op types), for mode ptq; fp16/qat
  go through the shared ONNX pass (OpenVINO compiles QDQ ONNX as it is);
- compile: read the ONNX, explicit PERFORMANCE_HINT / threads / streams / INFERENCE_PRECISION_HINT,
  save the IR (model.xml + model.bin) plus compile.json of the properties;
- evaluate: the IR measured through a runner (benchprog's "openvino" runtime) on the NPU when present,
  else on the CPU plugin with evidence saying so.

Nothing heavy is imported here: plan reads the fingerprint and schema without loading OpenVINO.
"""

from __future__ import annotations

import glob
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from backends.catalog import Target
from backends.sdk import toolchains
from backends.sdk.registration import Call, Dist, Registration, by_stage

NAME = "openvino"
INSTALL = "pip install 'npuctl[openvino]' (openvino, nncf)"

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "openvino compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "performance_hint": {
            "enum": ["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"],
            "default": "LATENCY",
            "description": "PERFORMANCE_HINT.",
        },
        "num_streams": {
            "type": "integer",
            "minimum": 1,
            "maximum": 64,
            "description": "NUM_STREAMS (default: 1 with LATENCY, the plugin's choice otherwise).",
        },
        "inference_precision": {
            "enum": ["f32", "f16", "bf16"],
            "description": "INFERENCE_PRECISION_HINT override (default: f32, or f16 with quantization.mode fp16).",
        },
        "execution_mode": {
            "enum": ["PERFORMANCE", "ACCURACY"],
            "description": "EXECUTION_MODE_HINT.",
        },
        "device": {
            "enum": ["NPU", "CPU", "GPU"],
            "description": "Force a device (default: NPU when present, else CPU).",
        },
    },
}


def dist_version(name: str) -> str:
    if name in ("openvino", "nncf") and toolchains.absent("openvino"):
        return "missing"
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


def npu_present() -> bool:
    """An Intel NPU driver exposes /dev/accel/accel*; checked without importing OpenVINO (fingerprints
    must not import the toolchain), and it goes into the keys: results change when an NPU appears."""
    return bool(glob.glob("/dev/accel/accel*"))


def fingerprint() -> dict[str, str]:
    return {
        "openvino": dist_version("openvino"),
        "nncf": dist_version("nncf"),
        "npu_device": "present" if npu_present() else "absent",
    }


_FINGERPRINT = Call(fingerprint)

STAGES: dict[str, Registration] = by_stage(
    Registration(
        "check",
        name="backends.openvino.check.OpenVinoCheck",
        version="3-openvino",
        ref="backends.openvino.check:OpenVinoCheck",
        fingerprint=(Dist("onnx"), Dist("numpy"), _FINGERPRINT),
    ),
    Registration(
        "quantize",
        name="backends.openvino.quantize.NncfQuantize",
        version="4",
        ref="backends.openvino.quantize:NncfQuantize",
        fingerprint=(
            _FINGERPRINT,
            Dist("onnx", "shared."),
            Dist("onnxruntime", "shared."),
            Dist("numpy", "shared."),
        ),
    ),
    Registration(
        "compile",
        name="backends.openvino.compile.OpenVinoCompile",
        version="4",
        ref="backends.openvino.compile:OpenVinoCompile",
        fingerprint=(_FINGERPRINT,),
    ),
    Registration(
        "evaluate",
        name="backends.openvino.evaluate.OpenVinoEvaluate",
        version="8",
        ref="backends.openvino.evaluate:OpenVinoEvaluate",
        fingerprint=(_FINGERPRINT,),
    ),
)


class OpenVinoBackend:
    name = NAME
    evidence_here = "measured:device on an Intel NPU when present, else measured:host (CPU plugin)"
    stages = STAGES

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def missing_toolchain(self) -> str | None:
        if dist_version("openvino") == "missing":
            return f"openvino not installed: {INSTALL}"
        return None

    def spec_errors(self, spec: dict[str, Any], target: Target) -> list[tuple[str, str]]:
        """What the NNCF quantize path cannot do with `quantization` (backends.openvino.quantize)."""
        from backends.openvino.quantize import spec_errors

        return spec_errors(spec.get("quantization") or {})
