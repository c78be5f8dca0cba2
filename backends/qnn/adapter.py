"""QNN stages: the recording preprocess/quantize passes and the compile that writes the SDK bundle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.qnn import ADAPTER_VERSION, SDK
from backends.sdk import metadata
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.vendor_bundle import (
    PREPROCESS_KEY,
    SENSITIVE_KEY,
    BundleCompile,
    RecordingPreprocess,
    RecordingQuantize,
    json_bytes,
    script,
)

BIN = "$QNN_SDK_ROOT/bin/x86_64-linux-clang"
LIB = "$QNN_SDK_ROOT/lib/x86_64-linux-clang"
GRAPH = "model"
"""The graph name: fixed, so context binaries are reproducible (Qualcomm's AI Hub pins it too)."""

_OVERRIDE = {"fp16": {"bitwidth": 16, "dtype": "float"}, "fp32": {"bitwidth": 32, "dtype": "float"}}
_OVERRIDE["int16"] = {"bitwidth": 16, "dtype": "int"}


class QnnPreprocess(RecordingPreprocess):
    pass


class QnnQuantize(RecordingQuantize):
    pass


def quantization_overrides(model: Any, kept: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """AIMET-format encodings overrides (--quantization_overrides) for the kept layers: their output
    activations and their weights at the kept precision; None when no layer is kept."""
    from backends.sdk.vendor_bundle import tensor_names

    if not kept:
        return None
    by_precision: dict[str, list[str]] = {}
    for entry in kept:
        by_precision.setdefault(str(entry["precision"]), []).append(str(entry["node"]))
    activations: dict[str, list[dict[str, Any]]] = {}
    params: dict[str, list[dict[str, Any]]] = {}
    for precision, nodes in sorted(by_precision.items()):
        encoding = _OVERRIDE.get(precision)
        if encoding is None:
            raise TerminalError(f"qnn: no quantization override for precision {precision}")
        acts, weights = tensor_names(model, nodes)
        for name in acts:
            activations[name] = [dict(encoding)]
        for name in weights:
            params[name] = [dict(encoding)]
    return {
        "activation_encodings": dict(sorted(activations.items())),
        "param_encodings": dict(sorted(params.items())),
    }


def htp_config(target: Target, compile_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The HTP backend extension config (graphs, devices) from compile.* and the catalog."""
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    level = int(compile_cfg.get("optimization_level", 3))
    graph: dict[str, Any] = {
        "graph_names": [GRAPH],
        "O": max(1, min(3, level)),
        "vtcm_mb": int(options.get("vtcm_mb", 0)),
        "fp16_relaxed_precision": 1 if options.get("fp16_relaxed_precision", True) else 0,
    }
    if options.get("hvx_threads"):
        graph["hvx_threads"] = int(options["hvx_threads"])
    device = {
        "device_id": 0,
        "soc_model": str(options.get("soc_model") or target.extra.get("qnn_soc_model", "")),
        "dsp_arch": str(options.get("dsp_arch") or target.extra.get("htp_arch", "")),
        "cores": [
            {
                "core_id": 0,
                "perf_profile": str(options.get("perf_profile", "burst")),
                "rpc_control_latency": 100,
            }
        ],
    }
    return {"graphs": [graph], "devices": [device]}


def extensions_config() -> dict[str, Any]:
    return {
        "backend_extensions": {
            "shared_library_path": "libQnnHtpNetRunExtensions.so",
            "config_file_path": "htp_config.json",
        }
    }


def _layout(shape: Sequence[int]) -> str | None:
    if len(shape) != 4:
        return None
    return "NHWC" if shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4) else "NCHW"


def converter_args(
    inputs: Sequence[Any], preprocess: Mapping[str, Any] | None, mode: str, overrides: bool
) -> list[str]:
    """qnn-onnx-converter's command line."""
    argv = [f"{BIN}/qnn-onnx-converter", "--input_network", "model.onnx", "--output_path", f"out/{GRAPH}.cpp"]
    for spec in inputs:
        argv += ["--input_dim", spec.name, ",".join(str(d) for d in spec.shape)]
    if preprocess:
        name = preprocess.get("input") or inputs[0].name
        spec = next((s for s in inputs if s.name == name), inputs[0])
        layout = _layout(spec.shape)
        if layout:
            argv += ["--input_layout", spec.name, layout]
        argv += ["--input_dtype", spec.name, spec.dtype]
        color = preprocess.get("color") or {}
        fed = color.get("from")
        if fed in ("rgb", "bgr"):
            # The channel swap (if any) is folded into the ONNX graph, so the network's input encoding is
            # the one the application feeds, in and out: the converter must not convert again.
            argv += ["--input_encoding", spec.name, fed, fed]
    if mode == "fp16":
        argv += ["--float_bitwidth", "16"]
    if overrides:
        argv += ["--quantization_overrides", "quantization_overrides.json"]
    return argv


def commands(convert: list[str]) -> list[list[str]]:
    return [
        convert,
        [
            f"{BIN}/qnn-model-lib-generator",
            "-c",
            f"out/{GRAPH}.cpp",
            "-b",
            f"out/{GRAPH}.bin",
            "-o",
            "out/lib",
            "-t",
            "x86_64-linux-clang",
        ],
        [
            f"{BIN}/qnn-context-binary-generator",
            "--backend",
            f"{LIB}/libQnnHtp.so",
            "--model",
            f"out/lib/x86_64-linux-clang/lib{GRAPH}.so",
            "--binary_file",
            GRAPH,
            "--output_dir",
            "out",
            "--config_file",
            "htp_backend_extensions.json",
        ],
    ]


def bundle_members(
    model_path: Path, target: Target, config: Mapping[str, Any]
) -> tuple[dict[str, bytes | Path], dict[str, Any]]:
    """Every file of the bundle, and the manifest (also one of the files)."""
    import onnx

    from backends.passes.data import model_inputs

    model = onnx.load(str(model_path), load_external_data=False)
    inputs = model_inputs(model)
    preprocess = metadata.get(model, PREPROCESS_KEY)
    sensitive = metadata.get(model, SENSITIVE_KEY) or {}
    mode = str(config.get("quantization.mode") or "none")
    overrides = quantization_overrides(model, sensitive.get("kept") or [])
    compile_cfg: Mapping[str, Any] = config.get("compile") or {}
    argvs = commands(converter_args(inputs, preprocess, mode, overrides is not None))
    manifest = {
        "format_version": 1,
        "sdk": "qnn",
        "target": target.id,
        "graph": GRAPH,
        "quantization_mode": mode,
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in inputs],
        "commands": argvs,
        "context_binary": f"out/{GRAPH}.bin",
    }
    members: dict[str, bytes | Path] = {
        "model.onnx": model_path,
        "build.sh": script(argvs, SDK, f"QNN HTP context binary for {target.id}").encode(),
        "htp_config.json": json_bytes(htp_config(target, compile_cfg)),
        "htp_backend_extensions.json": json_bytes(extensions_config()),
        "manifest.json": json_bytes(manifest),
    }
    if overrides is not None:
        members["quantization_overrides.json"] = json_bytes(overrides)
    return members, manifest


class QnnCompile(BundleCompile):
    sdk = SDK
    bundle_name = "qnn-bundle.tar"
    artifact = "context"
    adapter_version = ADAPTER_VERSION

    def members(self, model: Path, request: StageRequest) -> tuple[dict[str, bytes | Path], dict[str, Any]]:
        return bundle_members(model, request.target, request.config)

    def output(self, manifest: Mapping[str, Any]) -> tuple[str, str, str]:
        return manifest["context_binary"], f"{manifest['graph']}.bin", "QNN context binary"
