"""What the RKNN stages share: the quantization bundle, sample conversion, and the worker build request.

RKNN quantizes inside its own build, and only the quantize stage's key covers the quantization section
and the calibration data, while only the compile stage's key covers `compile`. So the work is split:
quantize resolves the policy, matches sensitive layers and converts the calibration samples into the
layout RKNN reads (`.npy`, NCHW, raw values: RKNN applies mean/std itself), and writes them with the
model as one tar bundle; compile runs the one real build (config + load_onnx + build/hybrid + export)
from that bundle with the compile options. Evaluate re-runs the same build request to get a simulator
session and checks that it reproduces the compiled artifact byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from backends.catalog import Target
from backends.rknn.preprocess import read_meta
from backends.sdk import bundles
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

    from backends.passes.data import InputSpec

QUANT_FILE = "quant.json"
MODEL_FILE = "model.onnx"
DATASET_FILE = "dataset.txt"
PLATFORMS = (
    "rv1103",
    "rv1103b",
    "rv1106",
    "rv1106b",
    "rv1126b",
    "rk2118",
    "rk3562",
    "rk3566",
    "rk3568",
    "rk3576",
    "rk3588",
)
CORE_MASKS = {0: ("NPU_CORE_AUTO", 0), 1: ("NPU_CORE_0", 1), 2: ("NPU_CORE_0_1", 3), 3: ("NPU_CORE_0_1_2", 7)}
"""compile.cores -> RKNN core_mask (rknn.api.RKNN constants); 0 means unset (the runtime chooses)."""


@dataclass
class Prepared:
    """A model ready for the worker: the ONNX, its RKNN preprocess record, the quantization plan and
    the calibration files (paths inside `folder`)."""

    folder: Path
    onnx: Path
    meta: dict[str, Any] | None
    quant: dict[str, Any] = field(default_factory=lambda: {"quantize": False})
    dataset: str | None = None


def platform(target: Target, options: Mapping[str, Any]) -> str:
    name = str(options.get("target_platform") or target.extra.get("rknn_platform") or target.id)
    if name not in PLATFORMS:
        raise TerminalError(
            f"rknn: unknown target_platform {name!r} (rknn-toolkit2 knows {', '.join(PLATFORMS)})"
        )
    return name


def core_mask(target: Target, cores: int | None) -> dict[str, Any]:
    """compile.cores as the core mask recorded for on-device runs (RK3588: 1-3 cores; RK3576: 1-2)."""
    if cores is None:
        name, value = CORE_MASKS[0]
        return {"cores": None, "name": name, "value": value}
    if cores > target.npu_cores:
        raise TerminalError(f"compile.cores {cores}: target {target.id} has {target.npu_cores} NPU core(s)")
    name, value = CORE_MASKS[cores]
    if target.npu_cores == 1:
        name, value = CORE_MASKS[0]  # single-core NPUs take no core mask
    return {"cores": cores, "name": name, "value": value}


# ---------------------------------------------------------------- samples in RKNN's layout


def raw_inputs(model_inputs: Sequence[InputSpec], meta: Mapping[str, Any] | None) -> list[InputSpec]:
    """The inputs as the application feeds them: with an RKNN preprocess record, the preprocessed input
    is the raw frame (NHWC or NCHW, uint8 or float32); other inputs are as the model takes them."""
    from backends.passes.data import InputSpec

    if not meta:
        return list(model_inputs)
    out = []
    for spec in model_inputs:
        if spec.name != meta["input"]:
            out.append(spec)
            continue
        n, c, h, w = meta["model_shape"]
        shape = (n, h, w, c) if meta["layout"] == "nhwc" else (n, c, h, w)
        out.append(InputSpec(spec.name, shape, str(meta["dtype"])))
    return out


def to_model_layout(array: np.ndarray, spec_name: str, meta: Mapping[str, Any] | None) -> np.ndarray:
    """A raw sample as RKNN takes it in the ONNX model's layout (NCHW float32, not normalized)."""
    import numpy as np

    arr = np.asarray(array)
    if meta and spec_name == meta["input"] and meta["layout"] == "nhwc":
        arr = arr.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(arr.astype(np.float32))


def normalized(array: np.ndarray, spec_name: str, meta: Mapping[str, Any] | None) -> np.ndarray:
    """What the float reference model takes: (raw - mean) / std in NCHW (RKNN's own arithmetic)."""
    import numpy as np

    arr = to_model_layout(array, spec_name, meta)
    if not meta or spec_name != meta["input"]:
        return arr
    mean = np.asarray(meta["mean_values"], dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(meta["std_values"], dtype=np.float32).reshape(1, -1, 1, 1)
    return np.ascontiguousarray((arr - mean) / std)


def color_of(meta: Mapping[str, Any] | None) -> Literal["rgb", "bgr"]:
    """The channel order 3-channel images are read in: the order the application feeds."""
    src = (meta or {}).get("color_from")
    return "bgr" if src == "bgr" else "rgb"


# ---------------------------------------------------------------- bundle


def prepare(model: Path, folder: Path) -> Prepared:
    """Unpacks a quantize bundle (or takes a plain ONNX from an idle quantize stage) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    if bundles.is_bundle(model):
        bundles.extract(model, folder)
        onnx_path = folder / MODEL_FILE
        quant = json.loads((folder / QUANT_FILE).read_text())
        dataset = DATASET_FILE if (folder / DATASET_FILE).exists() else None
        return Prepared(folder, onnx_path, read_meta(onnx_path), quant, dataset)
    if model.suffix != ".onnx":
        raise TerminalError(f"rknn: expected an ONNX model or a quantize bundle, got {model.name}")
    onnx_path = folder / MODEL_FILE
    onnx_path.write_bytes(model.read_bytes())
    return Prepared(folder, onnx_path, read_meta(onnx_path))


def graph_inputs(onnx_path: Path) -> tuple[list[str], list[list[int]]]:
    from backends.passes.data import model_inputs

    specs = model_inputs(onnx_path)
    return [s.name for s in specs], [list(s.shape) for s in specs]


def build_request(prep: Prepared, target: Target, compile_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The worker request for the one real build (paths relative to `prep.folder`)."""
    options: Mapping[str, Any] = compile_cfg.get("options") or {}
    names, shapes = graph_inputs(prep.onnx)
    quant = prep.quant
    config: dict[str, Any] = {
        "target_platform": platform(target, options),
        "optimization_level": int(compile_cfg.get("optimization_level", 3)),
        "float_dtype": "float16",
    }
    if prep.meta:
        index = names.index(prep.meta["input"])
        means = [[0.0] * s[1] if len(s) == 4 else [0.0] for s in shapes]
        stds = [[1.0] * s[1] if len(s) == 4 else [1.0] for s in shapes]
        means[index], stds[index] = list(prep.meta["mean_values"]), list(prep.meta["std_values"])
        config["mean_values"], config["std_values"] = means, stds
    if quant.get("quantize"):
        for key in ("quantized_dtype", "quantized_algorithm", "quantized_method"):
            config[key] = quant[key]
    for key in (
        "single_core_mode",
        "compress_weight",
        "model_pruning",
        "remove_reshape",
        "enable_flash_attention",
    ):
        if key in options:
            config[key] = bool(options[key])
    batch = int(compile_cfg.get("batch", 1))
    return {
        "format_version": 1,
        "model": prep.onnx.name,
        "inputs": names,
        "input_shapes": shapes,
        "config": config,
        "quantize": bool(quant.get("quantize")),
        "own_qdq": carries_qdq(_graph(prep.onnx)),
        "dataset": prep.dataset if quant.get("quantize") else None,
        "hybrid": quant.get("hybrid"),
        "tail_hybrid": quant.get("tail_hybrid"),
        "auto_hybrid": bool(quant.get("auto_hybrid", False)),
        "rknn_batch_size": batch if batch > 1 else None,
        "output": "model.rknn",
    }


OWN_QDQ = "the model's own Q/DQ"


def carries_qdq(graph: Any) -> bool:
    """Whether the model's graph (an onnx GraphProto) carries its own Q/DQ nodes: rknn-toolkit2 then
    builds integer layers from their scales whatever the spec's mode (`qat`, or `none` on such a
    model), with do_quantization off."""
    from backends.passes.quantized import quantized

    found = quantized(n.op_type for n in graph.node)
    return found is not None and found.form == "qdq"


def _graph(model: Path) -> Any:
    from backends.passes.facts import load_light  # the graph only: no copy of a large model's weights

    return load_light(model).graph


def dtype_label(quantized_dtype: str | None, own_qdq: bool) -> str:
    """What a .rknn computes in, for notes and reports: the toolkit's quantized_dtype (w8a8, ...), the
    model's own Q/DQ (the toolkit reads the scales and builds integer layers from them), or float16."""
    return quantized_dtype or (OWN_QDQ if own_qdq else "float16")


def integer_build(req: Mapping[str, Any]) -> bool:
    """Whether the .rknn computes in integers (its own calibration, or the model's Q/DQ): such a build
    is checked against its source on the simulator before it is recorded."""
    return bool(req.get("quantize") or req.get("own_qdq"))
