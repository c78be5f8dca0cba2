"""OpenVINO compile: the prepared ONNX read by OpenVINO, compiled with explicit properties, saved as IR.

The ONNX is converted with `ov.convert_model` (because under OpenVINO 2026.4.1,
`core.read_model` of an NNCF-quantized detector gave an IR that found no boxes while convert_model's
was right), and whichever path is used, the saved IR is checked against its source before it is
recorded (backends.sdk.artifact_check): a compile that changes the numerics fails here.

INFERENCE_PRECISION_HINT is always set: on a CPU with AMX the plugin's default is bf16, so a "float"
run would silently be bf16. Weights are saved uncompressed (`compress_to_fp16=False`) unless the spec
asks for fp16. The compile is done for real (core.compile_model) on the device evaluate will use, so a
model the plugin cannot compile fails here, not at measurement time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.openvino import fingerprint
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line


def device(options: Mapping[str, Any], available: list[str]) -> str:
    """NPU when present (the target's device), else CPU; compile.options.device forces one."""
    forced = options.get("device")
    if forced:
        if forced not in available:
            raise TerminalError(
                f"openvino: compile.options.device {forced} is not available here ({', '.join(available)})"
            )
        return str(forced)
    return "NPU" if "NPU" in available else "CPU"


def properties(compile_cfg: Mapping[str, Any], mode: str) -> dict[str, str]:
    """The compile properties the spec sets, as strings (what ov.Core.compile_model accepts)."""
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    hint = str(options.get("performance_hint", "LATENCY"))
    precision = str(options.get("inference_precision") or ("f16" if mode == "fp16" else "f32"))
    props = {"PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": precision}
    cores = compile_cfg.get("cores")
    if cores:
        props["INFERENCE_NUM_THREADS"] = str(int(cores))
    streams = options.get("num_streams") or (1 if hint == "LATENCY" else None)
    if streams:
        props["NUM_STREAMS"] = str(int(streams))
    if options.get("execution_mode"):
        props["EXECUTION_MODE_HINT"] = str(options["execution_mode"])
    return dict(sorted(props.items()))


def canonical_names(model: Any, source_names: set[str]) -> int:
    """Renames the ops OpenVINO named itself (from a process-wide counter, `Multiply_2550`, so they
    depend on what the process converted before) to names from the op's position: the same ONNX then
    gives the same IR bytes in any process. Names the ONNX gave (its node and tensor names) are kept.
    Returns how many ops were renamed."""
    renamed = 0
    for index, op in enumerate(model.get_ordered_ops()):
        if op.get_friendly_name() not in source_names:
            op.set_friendly_name(f"{op.get_type_name()}_n{index}")
            renamed += 1
    return renamed


def onnx_names(path: Path) -> set[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = {n.name for n in model.graph.node} | {t for n in model.graph.node for t in (*n.input, *n.output)}
    return names | {v.name for v in (*model.graph.input, *model.graph.output)}


def _effective(compiled: Any, keys: list[str]) -> dict[str, str]:
    out = {}
    for key in keys:
        try:
            value = compiled.get_property(key)
            name = getattr(value, "get_type_name", None)
            out[key] = str(name()) if callable(name) else str(value)
        except Exception:
            continue
    return out


def check_ir(
    request: StageRequest, xml: Path, settings: dict[str, Any], source: Path, mode: str
) -> dict[str, Any]:
    """The saved IR run through the local runner (benchprog, the shared harness) on the check samples,
    against the source ONNX under ONNX Runtime; a disagreement fails this compile (artifact_check)."""
    import tempfile

    from backends.openvino.evaluate import prepare_job
    from backends.passes.data import model_inputs
    from backends.runners.local import LocalRunner
    from backends.sdk import artifact_check as A

    inputs = model_inputs(source)
    samples, data = A.check_samples(request, inputs)
    with tempfile.TemporaryDirectory(prefix="npuctl-ov-check-") as tmp:
        job = Path(tmp)
        prepare_job(job, xml, xml.with_suffix(".bin"), settings, samples, inputs, {"warmup": 0, "runs": 1})
        result = LocalRunner().run(job, 600.0, request.log)
        outputs = A.runner_outputs(job, result)
    precision = str(settings["properties"].get("INFERENCE_PRECISION_HINT", "f32"))
    limit = A.tolerance(precision, quantized=mode in ("ptq", "qat") or A.quantized_source(source))
    what = f"compile: the OpenVINO IR ({settings['device']}, {precision})"
    return A.judge(request, source, samples, outputs, limit, what, data)


def converted(source: Path) -> Any:
    """`ov.convert_model` of the ONNX file (see the module doc: read_model alone lost boxes). It reads
    a path with a comma as a list of paths, so such a file is read through a link to its folder from a
    scratch folder without one (its external data files resolve beside it, as in its own folder)."""
    import openvino as ov

    if "," not in str(source):
        return ov.convert_model(str(source))
    from backends.sdk import outside_tmp

    with outside_tmp.folder("npuctl-openvino-") as scratch:
        (scratch / "model").symlink_to(source.resolve().parent, target_is_directory=True)
        return ov.convert_model(str(scratch / "model" / source.name))


class OpenVinoCompile:
    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        import openvino as ov

        from backends.sdk.artifact_check import summary

        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("compile: no model input")
        compile_cfg: Mapping[str, Any] = request.config.get("compile") or {}
        mode = str(request.config.get("quantization.mode") or "none")
        core = ov.Core()
        dev = device(compile_cfg.get("options") or {}, list(core.available_devices))
        props = properties(compile_cfg, mode)
        try:
            model = converted(Path(source))
            canonical_names(model, onnx_names(Path(source)))
            compiled = core.compile_model(model, dev, props)
        except Exception as exc:
            raise TerminalError(
                f"openvino cannot compile {Path(source).name} for {dev}: {one_line(exc)}"
            ) from exc
        effective = _effective(compiled, [*props, "NUM_STREAMS", "INFERENCE_NUM_THREADS"])
        xml = request.workdir / "model.xml"
        compress = mode == "fp16"
        ov.save_model(model, str(xml), compress_to_fp16=compress)
        settings = {
            "format_version": 1,
            "device": dev,
            "target_device": str(request.target.extra.get("openvino_device", "NPU")),
            "properties": props,
            "compress_to_fp16": compress,
            "openvino": ov.get_version(),
        }
        cfg_path = request.workdir / "compile.json"
        cfg_path.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
        request.log.parent.mkdir(parents=True, exist_ok=True)
        request.log.write_text(
            json.dumps({"settings": settings, "effective": effective}, indent=1, sort_keys=True) + "\n"
        )
        check = check_ir(request, xml, settings, Path(source), mode)

        report = {
            "check": check,
            "device": dev,
            "properties": props,
            "effective_properties": effective,
            "compress_to_fp16": compress,
            "fusion": "rewrite.fusion is applied by the shared rewrite pass; OpenVINO fuses at compile time",
        }
        note = (
            f"OpenVINO IR for {dev}, {props['INFERENCE_PRECISION_HINT']}, {props['PERFORMANCE_HINT']}; "
            f"{summary(check)}"
        )
        return StageOutput(
            artifacts={
                "openvino_xml": xml,
                "openvino_bin": xml.with_suffix(".bin"),
                "openvino_config": cfg_path,
            },
            report=report,
            note=note,
        )
