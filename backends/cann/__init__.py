"""Huawei Ascend backend through CANN ATC: a bundle adapter (see backends.sdk).

ATC cannot be installed here. compile writes what it takes (toolchains.md §4): `build.sh` with the
`atc` command line (`--framework=5 --input_shape --soc_version --precision_mode`, plus
`--insert_op_conf`, `--fusion_switch_file`, `--keep_dtype` when used), the AIPP config from the
preprocess section (converted by backends.passes.preprocess.forms), a fusion switch file from
`rewrite.fusion`, and a keep_dtype list from the sensitive layers. With ATC (`ASCEND_TOOLKIT_HOME` or
`atc` on PATH) it runs it and the .om becomes an artifact too.

preprocess is CANN's own: when the section fits AIPP (uint8 NHWC frames, no resize), the graph is left
as it is and AIPP does the colour swap and normalization on the AI Core; otherwise the shared pass folds
it into the graph. quantize is the shared pass plus a record of the kept layers (backends.sdk.metadata).
"""

from __future__ import annotations

from typing import Any

from backends.passes import SHARED
from backends.sdk.base import StageImpl
from backends.sdk.registration import Registration, by_stage
from backends.sdk.vendor_bundle import Sdk

NAME = "cann"
ADAPTER_VERSION = "1"
SDK = Sdk(
    name="cann",
    env_var="ASCEND_TOOLKIT_HOME",
    tools=("atc",),
    bin_dirs=("bin", "compiler/bin"),
    install_hint="install the Ascend CANN toolkit and set ASCEND_TOOLKIT_HOME (source set_env.sh)",
)
PRECISION_MODES = (
    "force_fp32",
    "cube_fp16in_fp32out",
    "force_fp16",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)

OPTIONS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "cann compile.options",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "precision_mode": {
            "enum": list(PRECISION_MODES),
            "description": "ATC --precision_mode (default from quantization.mode: none -> must_keep_origin_dtype, "
            "fp16 -> force_fp16, ptq/qat -> allow_mix_precision).",
        },
        "soc_version": {
            "type": "string",
            "description": "Override the catalog's --soc_version (e.g. Ascend310P3).",
        },
        "op_select_implmode": {
            "enum": ["high_precision", "high_performance"],
            "description": "ATC --op_select_implmode.",
        },
    },
}


def bundle_evaluate() -> StageImpl:
    """evaluate: the bundle adapter's, for CANN's SDK and its .om."""
    from backends.sdk.vendor_bundle import BundleEvaluate

    return BundleEvaluate(SDK, "om")


STAGES: dict[str, Registration] = by_stage(
    Registration(
        "preprocess",
        name="backends.cann.adapter.CannPreprocess",
        version="1",
        ref="backends.cann.adapter:CannPreprocess",
        fingerprint=SHARED["preprocess"].fingerprint,
    ),
    Registration(
        "quantize",
        name="backends.cann.adapter.CannQuantize",
        version="1+record",
        ref="backends.cann.adapter:CannQuantize",
    ),
    Registration(
        "compile",
        name="backends.cann.adapter.CannCompile",
        version=ADAPTER_VERSION,
        ref="backends.cann.adapter:CannCompile",
    ),
    Registration(
        "evaluate", name="backends.sdk.BundleEvaluate", version="1", ref="backends.cann:bundle_evaluate"
    ),
)


class CannBackend:
    name = NAME
    stages = STAGES
    evidence_here = "unverified: ATC bundle only (the CANN toolkit is not installable here)"

    def fingerprint(self) -> dict[str, str]:
        return {"cann_toolkit": SDK.version(), "adapter": ADAPTER_VERSION}

    def options_schema(self) -> dict[str, Any]:
        return OPTIONS_SCHEMA

    def spec_errors(self, spec: dict[str, Any], target: Any) -> list[tuple[str, str]]:
        """(field, message) for settings this toolchain cannot build, reported by `validate`: ATC does
        not calibrate and rejects a QDQ ONNX (an int8 .om needs AMCT's own conversion first, which this
        bundle does not run), so a ptq spec would end in an artifact ATC refuses."""
        if (spec.get("quantization") or {}).get("mode") != "ptq":
            return []
        return [
            (
                "quantization.mode",
                f"ptq cannot be built for {target.id}: ATC rejects a QDQ model (int8 needs Huawei's AMCT "
                "before ATC, which npuctl does not run); use mode: fp16 (ATC --precision_mode force_fp16), "
                "or quantize with AMCT yourself and point model.path at its output",
            )
        ]

    def missing_toolchain(self) -> str | None:
        return None  # the bundle is written without ATC; evaluate reports ATC as missing
