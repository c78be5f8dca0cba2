"""compile for MediaTek: the TFLite plus the exact `ncc-tflite` command, run when NeuroPilot is here."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.mediatek import ADAPTER_VERSION, ALLOWED, SDK
from backends.sdk import bundles
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.vendor_bundle import json_bytes, run_tools, script
from backends.tflite import fingerprint as tflite_fingerprint
from backends.tflite.stages import source_onnx, tflite_of

BIN = "$NEUROPILOT_SDK_ROOT/host/bin"


def ncc_args(
    target: Target, compile_cfg: Mapping[str, Any], variant: str, float_layers: bool = False
) -> list[str]:
    """ncc-tflite's command line for the bundle's model.tflite. Float32 ops (a float model, or layers
    the spec kept float in an int8 one) get --relax-fp32: the APU computes them in fp16, it has no fp32."""
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    arch = str(options.get("arch") or target.extra.get("neuropilot_arch") or "")
    argv = [
        f"{BIN}/ncc-tflite",
        f"--arch={arch}",
        f"--opt={max(0, min(3, int(compile_cfg.get('optimization_level', 3))))}",
    ]
    if options.get("num_mdla"):
        argv.append(f"--num-mdla={int(options['num_mdla'])}")
    if options.get("l1_size_kb") is not None:
        argv.append(f"--l1-size-kb={int(options['l1_size_kb'])}")
    relax = options.get("relax_fp32")
    if relax or (relax is None and (variant == "float32" or float_layers)):
        argv.append("--relax-fp32")
    if options.get("opt_accuracy"):
        argv.append("--opt-accuracy")
    if options.get("opt_footprint"):
        argv.append("--opt-footprint")
    argv += ["--show-memory-summary", "model.tflite", "-o", "out/model.dla"]
    return argv


class NccCompile:
    """Stage "compile": the bundle (model.tflite, build.sh, manifest.json), the .dla when ncc-tflite is here."""

    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        return {"neuropilot": SDK.version(), "adapter": ADAPTER_VERSION, **tflite_fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        tflite, io_path, converted = tflite_of(request, ALLOWED)
        record = json.loads(io_path.read_text())
        compile_cfg: Mapping[str, Any] = request.config.get("compile") or {}
        argv = ncc_args(request.target, compile_cfg, record["variant"], bool(record.get("kept_float")))
        manifest = {
            "format_version": 1,
            "sdk": "neuropilot",
            "target": request.target.id,
            "variant": record["variant"],
            "inputs": [{k: t[k] for k in ("name", "shape", "dtype")} for t in record["io"]["inputs"]],
            "commands": [argv],
            "dla": "out/model.dla",
        }
        members: dict[str, bytes | Path] = {
            "model.tflite": tflite,
            "build.sh": script([argv], SDK, f"MediaTek NeuroPilot .dla for {request.target.id}").encode(),
            "manifest.json": json_bytes(manifest),
        }
        bundle = bundles.write(
            request.workdir / "neuropilot-bundle.tar", members, executable=frozenset({"build.sh"})
        )
        artifacts = {"bundle": bundle, "tflite": tflite, "tflite_io": io_path}
        request.log.parent.mkdir(parents=True, exist_ok=True)
        with request.log.open("a") as fh:
            fh.write(bundles.read(bundle, "build.sh").decode())
        missing = SDK.missing()
        report: dict[str, Any] = {
            "bundle": bundles.names(bundle),
            "commands": manifest["commands"],
            "variant": record["variant"],
            "tool_ran": not missing,
            "converted_here": converted is not None,
        }
        told = operator_account(request, tflite, artifacts, report)
        if missing:
            report["toolchain"] = SDK.not_installed()
            note = f"{record['variant']} TFLite + ncc-tflite bundle only: {SDK.not_installed()}; {told}"
            return StageOutput(artifacts=artifacts, report=report, note=note)
        with tempfile.TemporaryDirectory(prefix="npuctl-neuropilot-") as tmp:
            work = bundles.extract(bundle, Path(tmp))
            (work / "out").mkdir(exist_ok=True)
            run_tools(manifest["commands"], SDK, work, request.log)
            dla = request.workdir / "model.dla"
            dla.write_bytes((work / "out" / "model.dla").read_bytes())
        artifacts["dla"] = dla
        return StageOutput(
            artifacts=artifacts,
            report=report,
            note=f".dla for {request.target.id} ({dla.stat().st_size} bytes); {told}",
        )


def operator_account(
    request: StageRequest, tflite: Path, artifacts: dict[str, Path], report: dict[str, Any]
) -> str:
    """Placement, coverage and crossings from the TFLite's own operators (backends.mediatek.account),
    into `report` (and the ONNX-node placement into `artifacts`); returns the note's clause."""
    from backends.mediatek import account
    from backends.passes.check import dump_json, quantization_config, summarize
    from backends.tflite import operators

    ops = operators(tflite, request.workdir / "operators", request.log)
    told = account.read(
        ops, source_onnx(request, tflite), request.target, quantization_config(request.config)
    )
    if "nodes" in told.placement:
        artifacts["tool_placement"] = request.workdir / "placement.json"
        artifacts["tool_placement"].write_text(dump_json(told.placement))
        report["placement"] = summarize(told.placement) | {"tool_operators": told.placement["tool_operators"]}
    else:
        report["placement"] = {"tool_operators": told.placement["tool_operators"]}
    report["measurements"] = told.measurements
    return told.note
