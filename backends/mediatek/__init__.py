"""MediaTek APU (MDLA) backend: the TFLite NeuroPilot's `ncc-tflite` takes, and its exact command bundle.

NeuroPilot cannot be installed here. Stages it implements itself:
- quantize: onnx2tf's TFLite for the spec (full int8 calibrated on the spec's data, 16x8, float16, or
  float32 compiled with --relax-fp32), through the managed tflite toolchain (backends.tflite);
- compile: a bundle with that TFLite, `build.sh` holding the `ncc-tflite` command line (--arch from the
  catalog, --opt from compile.optimization_level, options below) and a manifest; with the SDK
  (`NEUROPILOT_SDK_ROOT` or ncc-tflite on PATH) it runs it and the .dla becomes an artifact too;
- evaluate: accuracy of that TFLite on LiteRT on this host (`measured:host`: the arithmetic the APU is
  given, not the APU's own result); no latency is measured, so latency SLOs stay on the check stage's
  estimate, and nothing says the MDLA ran it.
"""

from __future__ import annotations

from typing import Any

from backends.catalog import Target
from backends.sdk.base import StageImpl
from backends.sdk.registration import Registration, by_stage
from backends.sdk.vendor_bundle import Sdk
from backends.tflite.keys import QUANTIZE_VERSION

NAME = "mediatek"
ADAPTER_VERSION = "3"
SDK = Sdk(
    name="neuropilot",
    env_var="NEUROPILOT_SDK_ROOT",
    tools=("ncc-tflite",),
    bin_dirs=("host/bin", "bin"),
    install_hint="install MediaTek NeuroPilot (ncc-tflite) and set NEUROPILOT_SDK_ROOT",
)
ALLOWED = ("full_int8", "int16_act", "float16", "float32")

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "mediatek compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "arch": {
            "type": "string",
            "description": "ncc-tflite --arch (default: the catalog's, e.g. mdla3.0).",
        },
        "num_mdla": {"type": "integer", "minimum": 1, "maximum": 8, "description": "ncc-tflite --num-mdla."},
        "l1_size_kb": {"type": "integer", "minimum": 0, "description": "ncc-tflite --l1-size-kb."},
        "opt_accuracy": {"type": "boolean", "description": "ncc-tflite --opt-accuracy."},
        "opt_footprint": {"type": "boolean", "description": "ncc-tflite --opt-footprint."},
        "relax_fp32": {
            "type": "boolean",
            "description": "ncc-tflite --relax-fp32 (default: on for a float32 model; MDLA has no fp32).",
        },
    },
}


def tflite_quantize() -> StageImpl:
    """quantize: onnx2tf's TFLite, in the variants ncc-tflite takes."""
    from backends.tflite.stages import TfliteQuantize

    return TfliteQuantize(ALLOWED)


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "quantize",
        name="backends.tflite.stages.TfliteQuantize",
        version=QUANTIZE_VERSION,
        ref="backends.mediatek:tflite_quantize",
    ),
    Registration(
        "compile",
        name="backends.mediatek.compile.NccCompile",
        version=ADAPTER_VERSION,
        ref="backends.mediatek.compile:NccCompile",
    ),
    Registration(
        "evaluate",
        name="backends.tflite.stages.TfliteEvaluate",
        version="3-litert",
        ref="backends.tflite.stages:TfliteEvaluate",
    ),
)


class MediaTekBackend:
    name = NAME
    stages = STAGES
    evidence_here = (
        "measured:host (the TFLite's accuracy on LiteRT); unverified on the APU: ncc-tflite bundle only"
    )

    def fingerprint(self) -> dict[str, str]:
        from backends import tflite

        return {"neuropilot": SDK.version(), "adapter": ADAPTER_VERSION, **tflite.fingerprint()}

    def spec_errors(self, spec: dict[str, Any], target: Target) -> list[tuple[str, str]]:
        """(field, message) for settings this toolchain cannot build, reported by `validate`."""
        from backends import tflite

        return tflite.spec_errors(spec.get("quantization") or {}, target.id)

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def missing_toolchain(self) -> str | None:
        from backends import tflite

        return tflite.missing()  # without NeuroPilot the bundle is still written (backends.sdk)
