"""Arm Ethos-U backend (ethos-u55, ethos-u85) through vela, Arm's compiler and performance model.

Stages it implements itself:
- quantize: onnx2tf's full-int8 (or 16x8) TFLite calibrated on the spec's data (backends.tflite: the
  Ethos-U computes integers only, so a float mode is refused with the reason);
- compile: vela for the catalog's accelerator/system config/memory mode (compile.options override
  them): the optimised .tflite with its `ethos-u` custom operator, vela's own NPU/CPU placement (the
  operators it leaves to the Cortex-M), its cycles and per-layer table, SRAM and flash use;
- evaluate: accuracy of the int8 TFLite on LiteRT on this host (`measured:host`: the Ethos-U executes
  the same integer arithmetic), and vela's cycles and time as the latency (`estimated: vela`), its
  SRAM as the memory figure the memory SLO is judged on (`estimated: vela`).

vela (ethos-u-vela, Apache-2.0) installs with `pip install 'npuctl[ethos-u]'`; it shares the main
stack's numpy. The TFLite conversion needs the managed tflite toolchain.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Any

from backends.catalog import Target
from backends.sdk.base import StageImpl
from backends.sdk.registration import Registration, by_stage
from backends.tflite.keys import QUANTIZE_VERSION

NAME = "ethos-u"
INSTALL = "pip install 'npuctl[ethos-u]' (ethos-u-vela)"
ACCELERATORS = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)
ALLOWED = ("full_int8", "int16_act")
"""The TFLite variants an Ethos-U runs: integer in, integer inside."""

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ethos-u compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "accelerator_config": {"enum": list(ACCELERATORS), "description": "vela --accelerator-config."},
        "system_config": {"type": "string", "description": "vela --system-config (a section of vela.ini)."},
        "memory_mode": {"type": "string", "description": "vela --memory-mode (a section of vela.ini)."},
        "optimise": {
            "enum": ["Performance", "Size"],
            "description": "vela --optimise (default Performance; Size at compile.optimization_level 0).",
        },
        "arena_cache_size": {
            "type": "integer",
            "minimum": 0,
            "description": "vela --arena-cache-size (bytes).",
        },
    },
}


def fingerprint() -> dict[str, str]:
    try:
        vela = version("ethos-u-vela")
    except PackageNotFoundError:
        vela = "missing"
    return {"ethos_u_vela": vela}


def tflite_quantize() -> StageImpl:
    """quantize: onnx2tf's TFLite, in the variants an Ethos-U runs."""
    from backends.tflite.stages import TfliteQuantize

    return TfliteQuantize(ALLOWED)


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "quantize",
        name="backends.tflite.stages.TfliteQuantize",
        version=QUANTIZE_VERSION,
        ref="backends.ethosu:tflite_quantize",
    ),
    Registration(
        "compile",
        name="backends.ethosu.vela.VelaCompile",
        version="2-vela",
        ref="backends.ethosu.vela:VelaCompile",
        entry="vela_model",  # the device runs vela's optimised file, not the int8 TFLite it read
    ),
    Registration(
        "evaluate",
        name="backends.ethosu.vela.VelaEvaluate",
        version="5-vela",
        ref="backends.ethosu.vela:VelaEvaluate",
    ),
)


class EthosUBackend:
    name = NAME
    stages = STAGES
    evidence_here = (
        "measured:host (int8 TFLite accuracy on LiteRT); estimated: vela (cycles, latency, SRAM/flash)"
    )

    def fingerprint(self) -> dict[str, str]:
        from backends import tflite

        return {**fingerprint(), **tflite.fingerprint()}

    def spec_errors(self, spec: dict[str, Any], target: Target) -> list[tuple[str, str]]:
        """(field, message) for settings this toolchain cannot build, reported by `validate`."""
        from backends import tflite

        return tflite.spec_errors(spec.get("quantization") or {}, target.id)

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def missing_toolchain(self) -> str | None:
        from backends import tflite

        if find_spec("ethosu") is None:
            return f"ethos-u-vela not installed: {INSTALL}"
        return tflite.missing()
