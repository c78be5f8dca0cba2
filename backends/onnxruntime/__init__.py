"""The ONNX Runtime backend: the `cpu` target, the reference every other backend is compared with.

quantize: the shared ptq pass with weights this host's int8 kernels sum exactly (_quantize).
compile: ORT graph optimization at the spec's level, fusions switched off through ORT's own optimizer
names, saved in ORT format with canonical bytes. evaluate: the artifact measured through a runner
(benchprog + the shared harness), scored by the one accuracy implementation.

Nothing heavy is imported here: plan reads the fingerprint and schema without loading a runtime.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from backends.passes import SHARED
from backends.sdk import dists
from backends.sdk.errors import TerminalError
from backends.sdk.host import host_isa
from backends.sdk.registration import Call, Registration, by_stage

FUSION_OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "conv_bn": ("ConvBNFusion", "ConvAddFusion", "ConvMulFusion"),
    "conv_activation": ("ConvActivationFusion", "ConvAddActivationFusion", "NchwcTransformer"),
    "matmul_add": ("MatMulAddFusion",),
    "constant_folding": ("ConstantFolding",),
}
"""rewrite.fusion switch -> ORT optimizers disabled when it is false. conv_bn also stops Conv+Mul/Add
folding (a BatchNormalization already decomposed into Mul and Add); conv_activation also disables the
NCHWc transformer, which fuses activations into its own convolutions at level 3. ORT ignores names it
does not know, so every name here is checked by a test that the switch changes the optimized graph."""

OPTIMIZATION_LEVELS = {0: "disable_all", 1: "basic", 2: "extended", 3: "all"}

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "onnxruntime compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "execution_mode": {
            "enum": ["sequential", "parallel"],
            "default": "sequential",
            "description": "ORT execution mode; parallel runs independent branches on inter-op threads.",
        },
        "inter_op_num_threads": {
            "type": "integer",
            "minimum": 0,
            "maximum": 64,
            "default": 0,
            "description": "Threads for parallel execution mode (0: ORT default).",
        },
        "enable_mem_pattern": {
            "type": "boolean",
            "default": True,
            "description": "Pre-plan memory from the first run's allocation pattern.",
        },
        "enable_cpu_mem_arena": {
            "type": "boolean",
            "default": True,
            "description": "Use ORT's CPU memory arena (off lowers peak memory, may cost latency).",
        },
    },
}


def _dist_version(name: str) -> str:
    return dists.version(name) or "missing"


def fingerprint() -> dict[str, str]:
    """Versions that shape the artifacts; flatbuffers writes the canonical .ort bytes."""
    return {
        "onnxruntime": _dist_version("onnxruntime"),
        "onnx": _dist_version("onnx"),
        "numpy": _dist_version("numpy"),
        "flatbuffers": _dist_version("flatbuffers"),
        "host_isa": host_isa(),
    }


def validate_options(options: Any) -> dict[str, Any]:
    """`compile.options` checked against OPTIONS_SCHEMA, with defaults filled in; a TerminalError names
    the offending option."""
    import jsonschema

    if not isinstance(options, dict):
        raise TerminalError(f"compile.options must be a mapping, got {type(options).__name__}")
    known = OPTIONS_SCHEMA["properties"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TerminalError(
            f"compile.options.{unknown[0]}: not an onnxruntime option (known: {', '.join(sorted(known))})"
        )
    errors = sorted(
        jsonschema.Draft202012Validator(OPTIONS_SCHEMA).iter_errors(options), key=lambda e: list(e.path)
    )
    if errors:
        where = ".".join(str(p) for p in errors[0].path)
        raise TerminalError(f"compile.options.{where}: {errors[0].message}")
    return {name: options.get(name, spec["default"]) for name, spec in known.items()}


def disabled_optimizers(fusion: Any) -> list[str]:
    """ORT optimizer names to disable for the `rewrite.fusion` switches that are false (sorted)."""
    switches = fusion if isinstance(fusion, dict) else {}
    unknown = sorted(set(switches) - set(FUSION_OPTIMIZERS))
    if unknown:
        raise TerminalError(f"rewrite.fusion.{unknown[0]}: onnxruntime has no such fusion switch")
    names = {name for switch, on in switches.items() if on is False for name in FUSION_OPTIMIZERS[switch]}
    return sorted(names)


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "quantize",
        name="backends.onnxruntime._quantize.HostQuantizePass",
        version=SHARED["quantize"].version + "+host2",  # the shared pass, the host's weights and kernels
        ref="backends.onnxruntime._quantize:HostQuantizePass",
        fingerprint=(*(SHARED["quantize"].fingerprint or ()), Call("backends.sdk.host:int8_fingerprint")),
    ),
    Registration(
        "compile",
        name="backends.onnxruntime._compile.CompilePass",
        version="2",
        ref="backends.onnxruntime._compile:CompilePass",
        fingerprint=(Call(fingerprint),),
    ),
    Registration(
        "evaluate",
        name="backends.onnxruntime._evaluate.EvaluatePass",
        version="10",
        ref="backends.onnxruntime._evaluate:EvaluatePass",
        fingerprint=(Call(fingerprint),),
    ),
)


class OnnxRuntimeBackend:
    name = "onnxruntime"
    evidence_here = "measured:host (ONNX Runtime CPU EP); measured:device through an ssh/adb runner"
    stages = STAGES

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def missing_toolchain(self) -> str | None:
        return None if find_spec("onnxruntime") is not None else "pip install onnxruntime"
