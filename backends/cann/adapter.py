"""CANN stages: AIPP-aware preprocess, the recording quantize pass, and the compile that writes the
ATC bundle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backends.cann import ADAPTER_VERSION, SDK
from backends.catalog import Target
from backends.sdk import metadata
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.vendor_bundle import (
    PREPROCESS_KEY,
    SENSITIVE_KEY,
    BundleCompile,
    RecordingQuantize,
    json_bytes,
    script,
)

AIPP_KEY = "npuctl.cann.aipp"

FUSION_PASSES: dict[str, tuple[tuple[str, str], ...]] = {
    "conv_bn": (("GraphFusion", "ConvBatchnormFusionPass"), ("GraphFusion", "ConvScaleFusionPass")),
    "conv_activation": (("UBFusion", "TbeConvDequantVaddReluQuantFusionPass"),),
    "matmul_add": (("GraphFusion", "MatMulBiasAddFusionPass"),),
}
"""rewrite.fusion switch -> ATC fusion patterns (names from the CANN graph/UB fusion reference).
constant_folding has no switch: ATC always folds constants."""


class CannQuantize(RecordingQuantize):
    pass


def aipp_plan(section: Mapping[str, Any], shape: Sequence[int]) -> dict[str, Any]:
    """AIPP fields for the model input (NCHW, 3 channels) or {"supported": False, "note": why not}."""
    from backends.passes.preprocess import forms as forms

    if section.get("resize"):
        return {"supported": False, "note": "AIPP resize is not generated; the resize stays in the model"}
    color = section.get("color") or {}
    if "gray" in (color.get("from"), color.get("to")):
        return {
            "supported": False,
            "note": "gray input is not generated as AIPP; preprocessing stays in the model",
        }
    if len(shape) != 4 or shape[1] != 3:
        return {"supported": False, "note": f"AIPP needs a 3-channel NCHW model input; it has {list(shape)}"}
    form = forms.canonical(section, 3)
    result: dict[str, Any] = forms.aipp_form(form, int(shape[2]), int(shape[3]))
    return result


class CannPreprocess:
    """Stage "preprocess": AIPP when it can express the section (the graph keeps its float NCHW input,
    and the .om takes the raw uint8 NHWC frame), else the shared fold; the decision is recorded."""

    stage = "preprocess"

    def fingerprint(self) -> dict[str, str]:
        from backends.passes.preprocess.stage import PreprocessPass

        return PreprocessPass().fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        from backends.passes.data import model_inputs

        section = dict(request.config.get("preprocess") or {})
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("preprocess: no model input")
        model = onnx.load(str(source), load_external_data=False)
        inputs = model_inputs(model)
        name = section.get("input") or inputs[0].name
        spec = next((s for s in inputs if s.name == name), None)
        if spec is None:
            raise TerminalError(f"preprocess.input {name!r} is not a model input")
        plan = aipp_plan(section, spec.shape)
        out = request.workdir / "model.onnx"
        if plan.get("supported"):
            plan["input"] = spec.name
            metadata.put(model, AIPP_KEY, plan)
            metadata.put(model, PREPROCESS_KEY, section)
            onnx.save(model, str(out))
            return StageOutput(
                artifacts={"model": out}, report={"aipp": plan}, note="preprocess as CANN AIPP"
            )
        from backends.passes.preprocess.stage import PreprocessPass

        output = PreprocessPass().run(request)
        folded = output.artifacts["model"]
        metadata.annotate(folded, out, {AIPP_KEY: plan, PREPROCESS_KEY: section})
        output.artifacts["model"] = out
        output.report["aipp"] = plan
        return output


def precision_mode(mode: str, options: Mapping[str, Any], has_keep: bool) -> str:
    if options.get("precision_mode"):
        return str(options["precision_mode"])
    if mode == "fp16":
        return "allow_mix_precision" if has_keep else "force_fp16"
    if mode in ("ptq", "qat"):
        return "allow_mix_precision"
    return "must_keep_origin_dtype"


def fusion_switch(fusion: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON fusion switch file: every mapped pattern on or off as the spec's switches say."""
    out: dict[str, dict[str, str]] = {"GraphFusion": {}, "UBFusion": {}}
    for switch, passes in FUSION_PASSES.items():
        state = "on" if fusion.get(switch, True) else "off"
        for kind, name in passes:
            out[kind][name] = state
    return {"Switch": {k: dict(sorted(v.items())) for k, v in out.items() if v}}


def keep_dtype_lines(kept: Sequence[Mapping[str, Any]]) -> list[str]:
    """keep_dtype file lines: one original node name per line (op-type rules were already expanded to
    node names by the quantize pass; ATC warns that names can change through fusion)."""
    return sorted({str(k["node"]) for k in kept if str(k.get("precision")) in ("fp16", "fp32")})


def atc_args(
    inputs: Sequence[Any],
    soc: str,
    precision: str,
    aipp: bool,
    keep: bool,
    options: Mapping[str, Any],
) -> list[str]:
    shapes = ";".join(f"{s.name}:{','.join(str(d) for d in s.shape)}" for s in inputs)
    argv = [
        "$ASCEND_TOOLKIT_HOME/bin/atc",
        "--framework=5",
        "--model=model.onnx",
        "--output=out/model",
        "--input_format=NCHW",
        f"--input_shape={shapes}",
        f"--soc_version={soc}",
        f"--precision_mode={precision}",
        "--fusion_switch_file=fusion_switch.cfg",
    ]
    if aipp:
        argv.append("--insert_op_conf=aipp.cfg")
    if keep:
        argv.append("--keep_dtype=keep_dtype.cfg")
    if options.get("op_select_implmode"):
        argv.append(f"--op_select_implmode={options['op_select_implmode']}")
    argv.append("--log=error")
    return argv


def bundle_members(
    model_path: Path, target: Target, config: Mapping[str, Any]
) -> tuple[dict[str, bytes | Path], dict[str, Any]]:
    import onnx

    from backends.passes.data import model_inputs

    model = onnx.load(str(model_path), load_external_data=False)
    inputs = model_inputs(model)
    compile_cfg: Mapping[str, Any] = config.get("compile") or {}
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    mode = str(config.get("quantization.mode") or "none")
    aipp = metadata.get(model, AIPP_KEY) or {}
    sensitive = metadata.get(model, SENSITIVE_KEY) or {}
    keep = keep_dtype_lines(sensitive.get("kept") or [])
    precision = precision_mode(mode, options, bool(keep))
    if keep and precision in ("must_keep_origin_dtype", "force_fp32"):
        keep = []  # keep_dtype has no effect under must_keep_origin_dtype (everything keeps its dtype)
    soc = str(options.get("soc_version") or target.extra.get("soc_version") or "")
    if not soc:
        raise TerminalError(f"cann: target {target.id} has no soc_version; set compile.options.soc_version")
    argv = atc_args(inputs, soc, precision, bool(aipp.get("supported")), bool(keep), options)
    fusion = config.get("rewrite.fusion") or {}
    manifest = {
        "format_version": 1,
        "sdk": "cann",
        "target": target.id,
        "quantization_mode": mode,
        "precision_mode": precision,
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in inputs],
        "aipp": aipp.get("aipp_op") if aipp.get("supported") else None,
        "aipp_note": aipp.get("note"),
        "commands": [argv],
        "om": "out/model.om",
        "notes": ["ATC does not calibrate: an int8 .om needs AMCT before ATC; a QDQ model is passed as it is"]
        if mode == "ptq"
        else [],
    }
    members: dict[str, bytes | Path] = {
        "model.onnx": model_path,
        "build.sh": script([argv], SDK, f"CANN ATC .om for {target.id} ({soc})").encode(),
        "fusion_switch.cfg": json_bytes(fusion_switch(fusion)),
        "manifest.json": json_bytes(manifest),
    }
    if aipp.get("supported"):
        members["aipp.cfg"] = str(aipp["config"]).encode()
    if keep:
        members["keep_dtype.cfg"] = ("\n".join(keep) + "\n").encode()
    return members, manifest


class CannCompile(BundleCompile):
    sdk = SDK
    bundle_name = "cann-bundle.tar"
    artifact = "om"
    adapter_version = ADAPTER_VERSION

    def members(self, model: Path, request: StageRequest) -> tuple[dict[str, bytes | Path], dict[str, Any]]:
        return bundle_members(model, request.target, request.config)

    def output(self, manifest: Mapping[str, Any]) -> tuple[str, str, str]:
        return manifest["om"], "model.om", "CANN .om"
