"""Qualcomm Hexagon (HTP) backend on onnxruntime-qnn (QNN's HTP library, run here in simulation).

Stages it implements itself (backends.qnn.stages and .evaluate; the QNN library only ever runs in a
child process, backends.qnn.worker):
- check: QNN's own per-node validation for the target's htp_arch/soc_model (it wins over the op
  table; the report's source names it, and each rejected node carries QNN's reason);
- quantize: the shared ptq pass with the HTP's types (uint8/uint16 activations, int8 weights);
- compile: an EPContext model + context binary prepared by the HTP backend for the target, and the
  QNN SDK bundle beside it (below);
- evaluate: the context model on the HTP simulator, accuracy vs the float ONNX (`measured:host
  simulator`) and the emulated cycles (`estimated: QNN HTP simulator cycles`, never device time; on
  x86 they follow host time, so no latency SLO is judged on them: latency stays the roofline's).

The QNN binaries come with onnxruntime-qnn from the package index (Qualcomm's licence: never vendored
here). The full QNN SDK cannot be installed here; the extra bundle holds what it takes (toolchains.md §5):
`build.sh` with the `qnn-onnx-converter`, `qnn-model-lib-generator` and `qnn-context-binary-generator`
command lines, a `--quantization_overrides` JSON (AIMET encodings format) for the sensitive layers,
the HTP backend extension config (`htp_backend_extensions.json` -> `htp_config.json`: VTCM,
optimisation level, performance profile, SoC/arch), and the input layout/dtype/encoding flags from the
preprocess section. With the SDK (`QNN_SDK_ROOT` or the tools on PATH) it runs them and the context
binary becomes an artifact too.

preprocess and quantize are the shared ONNX passes plus a record in the model's metadata
(backends.sdk.metadata) of what compile needs and cannot read from its own config: the preprocess
section and the layers kept at higher precision.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Any

from backends.sdk.registration import Call, Dist, Registration, by_stage
from backends.sdk.vendor_bundle import Sdk

NAME = "qnn"
ADAPTER_VERSION = "1"
INSTALL = "pip install 'npuctl[qnn]' (onnxruntime-qnn, beside onnxruntime >= 1.24.2)"


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "missing"


def fingerprint() -> dict[str, str]:
    """Read from package metadata, never by loading the QNN library."""
    return {"onnxruntime_qnn": _version("onnxruntime-qnn"), "onnxruntime": _version("onnxruntime")}


SDK = Sdk(
    name="qnn",
    env_var="QNN_SDK_ROOT",
    tools=("qnn-onnx-converter", "qnn-model-lib-generator", "qnn-context-binary-generator"),
    bin_dirs=("bin/x86_64-linux-clang",),
    install_hint="install the Qualcomm QNN / QAIRT SDK and set QNN_SDK_ROOT",
)
PERF_PROFILES = (
    "burst",
    "sustained_high_performance",
    "high_performance",
    "balanced",
    "default",
    "power_saver",
    "low_power_saver",
    "high_power_saver",
    "extreme_power_saver",
    "low_balanced",
)

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "qnn compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "vtcm_mb": {
            "type": "integer",
            "minimum": 0,
            "maximum": 64,
            "default": 0,
            "description": "HTP graph vtcm_mb (0: the maximum the SoC has).",
        },
        "perf_profile": {
            "enum": list(PERF_PROFILES),
            "default": "burst",
            "description": "HTP core perf_profile.",
        },
        "fp16_relaxed_precision": {
            "type": "boolean",
            "default": True,
            "description": "HTP graph fp16_relaxed_precision (float ops run in fp16).",
        },
        "hvx_threads": {
            "type": "integer",
            "minimum": 1,
            "maximum": 8,
            "description": "HTP graph hvx_threads.",
        },
        "soc_model": {"type": "string", "description": "Override the catalog's soc_model (e.g. SM8650)."},
        "dsp_arch": {
            "type": "string",
            "pattern": "^v[0-9]+$",
            "description": "Override the HTP arch (v73, v75).",
        },
    },
}


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "check",
        name="backends.qnn.stages.QnnCheck",
        version="4-qnn-verdicts",
        ref="backends.qnn.stages:QnnCheck",
        fingerprint=(Dist("onnx"), Dist("numpy"), Call(fingerprint)),
    ),
    Registration(
        "preprocess",
        name="backends.qnn.adapter.QnnPreprocess",
        version="1+record",
        ref="backends.qnn.adapter:QnnPreprocess",
    ),
    Registration(
        "quantize",
        name="backends.qnn.stages.QnnQuantize",
        version="1+record+htp6",
        ref="backends.qnn.stages:QnnQuantize",
    ),
    Registration(
        "compile",
        name="backends.qnn.stages.QnnCompile",
        version="6-quantized-source",
        ref="backends.qnn.stages:QnnCompile",
    ),
    Registration(
        "evaluate",
        name="backends.qnn.evaluate.QnnEvaluate",
        version="6-simulator",
        ref="backends.qnn.evaluate:QnnEvaluate",
    ),
)


class QnnBackend:
    name = NAME
    stages = STAGES
    evidence_here = (
        "measured:host simulator (accuracy on the HTP simulator); estimated: QNN HTP simulator cycles "
        "(recorded, never judged), latency from the roofline"
    )

    def fingerprint(self) -> dict[str, str]:
        return {"qnn_sdk": SDK.version(), "adapter": ADAPTER_VERSION, **fingerprint()}

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def missing_toolchain(self) -> str | None:
        if find_spec("onnxruntime_qnn") is None:
            return f"onnxruntime-qnn not installed: {INSTALL}"
        return None
