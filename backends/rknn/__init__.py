"""Rockchip RKNPU2 backend (rk3588, rk3576, rk3566, rk3562, rv1106) through rknn-toolkit2.

The toolkit pins numpy<=1.26.4 and onnx<=1.18, so it runs in a managed venv
(`npuctl toolchain install rknn`, backends.sdk.toolchains) and is driven as a subprocess (worker.py, JSON
request/result files). Stages it implements itself:

- preprocess: RKNN's own form (the NPU applies mean/std to the raw uint8 frame; see preprocess.py);
- quantize: the RKNN quantization plan and the calibration samples in RKNN's layout, as a bundle;
- compile: the one real build (config, load_onnx, build or hybrid quantization, export_rknn) and a
  sidecar JSON with the core mask and input contract for on-device runs;
- evaluate: with runner local, accuracy on the RKNN simulator vs the float ONNX (evidence
  "measured:host simulator", no latency: the simulator has no timing); with ssh:// or adb://, the
  .rknn on the board through benchprog's rknnlite runtime with the recorded core mask
  (evidence "measured:device").
import/check/rewrite come from the shared ONNX passes.
"""

from __future__ import annotations

from typing import Any

from backends.catalog import Target
from backends.sdk import toolchains
from backends.sdk.base import SpecNeed
from backends.sdk.registration import Registration, by_stage

NAME = "rknn"

EVALUATE_DATA = SpecNeed(
    field="evaluate.data",
    stage="evaluate",
    why="the RKNN simulator measures accuracy on samples, and has no timing to measure without them; "
    "set it, or run on the board (evaluate.runner ssh:// or adb://)",
    placeholder="../data/eval",
    when=("evaluate.runner", ("local",)),
)
"""Evaluate with runner local runs the simulator, which scores samples against the float model."""


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "preprocess",
        name="backends.rknn.preprocess.RknnPreprocess",
        version="1",
        ref="backends.rknn.preprocess:RknnPreprocess",
    ),
    Registration(
        "quantize",
        name="backends.rknn.stages.RknnQuantize",
        version="4",
        ref="backends.rknn.stages:RknnQuantize",
    ),
    Registration(
        "compile",
        name="backends.rknn.stages.RknnCompile",
        version="5",
        ref="backends.rknn.stages:RknnCompile",
    ),
    Registration(
        "evaluate",
        name="backends.rknn.stages.RknnEvaluate",
        version="10",
        ref="backends.rknn.stages:RknnEvaluate",
    ),
)
"""The fingerprints are the managed environment's (read by the implementations)."""


class RknnBackend:
    name = NAME
    stages = STAGES
    evidence_here = "measured:host simulator (accuracy, no latency); measured:device through ssh/adb"
    managed_toolchain = "rknn"
    spec_needs = (EVALUATE_DATA,)
    """The managed environment (backends.sdk.toolchains) it runs in: `npuctl toolchain install --needed` reads it."""

    def fingerprint(self) -> dict[str, str]:
        from backends.rknn.driver import worker_digest

        return {**toolchains.fingerprint(toolchains.RKNN), "worker": worker_digest()}

    def options_schema(self) -> dict[str, Any]:
        from backends.rknn.build import PLATFORMS

        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "rknn compile.options",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "target_platform": {
                    "enum": list(PLATFORMS),
                    "description": "Override the catalog's platform (rknn.config target_platform).",
                },
                "single_core_mode": {
                    "type": "boolean",
                    "description": "RK3588/RK3576: smaller single-core model.",
                },
                "compress_weight": {"type": "boolean", "description": "Compress weights (smaller .rknn)."},
                "model_pruning": {"type": "boolean", "description": "Prune the model to reduce its size."},
                "remove_reshape": {"type": "boolean", "description": "Remove Reshape at inputs/outputs."},
                "enable_flash_attention": {
                    "type": "boolean",
                    "description": "Flash attention for transformers.",
                },
            },
        }

    def spec_errors(self, spec: dict[str, Any], target: Target) -> list[tuple[str, str]]:
        """What rknn-toolkit2 cannot build on this chip with `quantization` (backends.rknn.quant_fit)."""
        from backends.passes.quant.policy import has_float
        from backends.rknn import quant_fit

        chip = str(target.extra.get("rknn_platform") or target.id)
        section = spec.get("quantization") or {}
        return quant_fit.errors(section, chip, has_float(target), target.default_activation)

    def missing_toolchain(self) -> str | None:
        if toolchains.python(toolchains.RKNN) is None:
            return (
                f"rknn-toolkit2 {toolchains.RKNN.version} not installed: run `npuctl toolchain install rknn`"
            )
        return None
