"""Runs inside the managed tflite venv (onnx2tf + LiteRT): `python -I worker.py REQUEST.json RESULT.json`.

Standalone: the standard library, numpy, onnx2tf and ai_edge_litert only (the venv has no npuctl).
Converts one static-shape ONNX model into every TFLite variant onnx2tf writes, calibrated on the given
samples (NHWC for 4-D inputs, as onnx2tf wants them), and describes each variant's inputs and outputs
(name, shape, dtype, quantization) read back through LiteRT's Interpreter.

Offline: for 4-D 3-channel inputs onnx2tf loads a sample calibration file even when calibration data
is given, and downloads it when absent; the worker writes that file from the given samples first.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
VARIANTS = {
    "float32": "_float32.tflite",
    "float16": "_float16.tflite",
    "dynamic_range": "_dynamic_range_quant.tflite",
    "int8": "_integer_quant.tflite",
    "full_int8": "_full_integer_quant.tflite",
    "int16_act": "_full_integer_quant_with_int16_act.tflite",
}


def _sample_file(calibration: dict[str, str]) -> None:
    """onnx2tf's sample file, from the caller's own 3-channel samples (nearest-neighbour to 128x128)."""
    import numpy as np

    for path in calibration.values():
        data = np.load(path)
        if data.ndim == 4 and data.shape[-1] == 3:
            rows = np.arange(128) * data.shape[1] // 128
            cols = np.arange(128) * data.shape[2] // 128
            resized = data[:, rows][:, :, cols].astype(np.float32)
            np.save(SAMPLE_FILE, np.resize(resized, (20, 128, 128, 3)).astype(np.float32))
            return


def _describe(path: Path) -> dict[str, Any]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))

    def one(d: dict[str, Any]) -> dict[str, Any]:
        scale, zero = d.get("quantization", (0.0, 0))
        return {
            "name": d["name"],
            "shape": [int(x) for x in d["shape"]],
            "dtype": str(d["dtype"].__name__),
            "scale": float(scale),
            "zero_point": int(zero),
        }

    return {
        "inputs": [one(d) for d in interpreter.get_input_details()],
        "outputs": [one(d) for d in interpreter.get_output_details()],
    }


def convert(request: dict[str, Any]) -> dict[str, Any]:
    """onnx2tf's float32 TFLite and SavedModel, then only the variant the spec asked for: TF's own
    converter on that SavedModel (what onnx2tf's -oiqt does for all five quantized variants at once)."""
    import onnx2tf

    calibration: dict[str, str] = request["calibration"]
    out = Path(request["output"])
    # onnx2tf traces the graph on these samples (on a downloaded image file without them)
    traced = calibration or _channels_last(request.get("check"), out.parent)
    _sample_file(traced)
    onnx2tf.convert(
        input_onnx_file_path=request["model"],
        output_folder_path=str(out),
        output_signaturedefs=True,  # the SavedModel gets the serving signature TF's converter reads
        custom_input_op_name_np_data_path=[[n, p, *_identity_norm(p)] for n, p in traced.items()] or None,
        non_verbose=True,
    )
    stem = Path(request["model"]).stem
    wanted = str(request["variant"])
    files = {"float32": out / f"{stem}{VARIANTS['float32']}"}
    kept: dict[str, Any] = {}
    if wanted == "float16":
        files["float16"] = out / f"{stem}{VARIANTS['float16']}"
    elif wanted in QUANTIZED:
        path = out / f"{stem}{VARIANTS[wanted]}"
        body, kept = quantized(out, request, wanted)
        path.write_bytes(body)
        files[wanted] = path
    elif wanted != "float32":
        raise ValueError(f"unknown TFLite variant {wanted!r}")
    variants = {}
    for variant, path in files.items():
        described = _describe(path)
        described["io"] = io_map(request["model"], described)
        variants[variant] = {"file": str(path), **described}
    if kept:
        variants[wanted]["kept"] = kept
    outputs = {}
    if request.get("check"):
        for variant, described_variant in variants.items():
            outputs[variant] = check_outputs(
                described_variant, request["check"], out / f"check-{variant}.npz"
            )
    return {"variants": variants, "check_outputs": outputs}


QUANTIZED = ("full_int8", "int16_act")


def quantized(saved_model: Path, request: dict[str, Any], variant: str) -> tuple[bytes, dict[str, Any]]:
    """The variant's TFLite bytes and, for kept layers, {ONNX node: its TFLite op, kept float}: LiteRT's
    selective quantization (the QuantizationDebugger's denylisted_nodes) on the calibrated model."""
    import tensorflow as tf

    calibration = {name: _load(path) for name, path in request["calibration"].items()}
    if not calibration:
        raise ValueError(f"{variant} TFLite needs calibration data")
    feeds = _signature_feeds(saved_model, calibration)
    count = min(len(x) for x in feeds.values())

    def representative() -> Any:
        for i in range(count):
            yield {name: x[i : i + 1] for name, x in feeds.items()}

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    ops = tf.lite.OpsSet
    wide = variant == "int16_act"
    integer = (
        ops.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8 if wide else ops.TFLITE_BUILTINS_INT8
    )
    converter.target_spec.supported_ops = [integer, ops.SELECT_TF_OPS]
    io_type = tf.int16 if wide else tf.int8
    keep = list(request.get("keep") or [])
    if not keep:
        converter.inference_input_type = io_type
        converter.inference_output_type = io_type
        body: bytes = converter.convert()
        return body, {}
    if wide:
        raise ValueError(
            "float layers inside a 16x8 TFLite are not built (TF's selective quantizer is int8 only)"
        )
    from tensorflow.lite.python import convert as tf_convert

    converter._experimental_calibrate_only = True
    calibrated = converter.convert()
    first = {name: np_first(path) for name, path in request["calibration"].items()}
    kept = _sibling("keep_locate").locate(request["model"], calibrated, keep, first)
    body = tf_convert.mlir_quantize(
        calibrated,
        fully_quantize=True,
        input_data_type=io_type,
        output_data_type=io_type,
        denylisted_nodes=sorted({k["tflite"] for k in kept.values()}),
    )
    dtypes = _sibling("keep_locate").tensor_dtypes(body)
    for found in kept.values():
        found["dtype"] = dtypes.get(found["tflite"], "missing")
    return body, kept


def _sibling(name: str) -> Any:
    """A module beside this file, by path (the worker runs isolated: its folder is not on sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"npuctl_tflite_{name}", Path(__file__).with_name(f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(path: str) -> Any:
    import numpy as np

    return np.load(path).astype(np.float32)


def _signature_feeds(saved_model: Path, calibration: dict[str, Any]) -> dict[str, Any]:
    """The calibration arrays keyed by the SavedModel signature's input names (onnx2tf keeps the ONNX
    names where TF allows them; otherwise matched by position)."""
    import tensorflow as tf

    _, spec = tf.saved_model.load(str(saved_model)).signatures["serving_default"].structured_input_signature
    names = list(spec)
    onnx_names = list(calibration)
    if len(names) != len(onnx_names):
        raise ValueError(f"SavedModel inputs {names} do not match the ONNX inputs {onnx_names}")
    if set(names) == set(onnx_names):
        return {n: calibration[n] for n in names}
    return {n: calibration[o] for n, o in zip(names, onnx_names, strict=True)}


def check_outputs(variant: dict[str, Any], samples: str, path: Path) -> str:
    """The variant's outputs (ONNX layout, float) on every check sample, stacked per output, saved to
    `path`: the parent scores them against the ONNX model with its own accuracy code."""
    import numpy as np

    stacked = dict(np.load(samples))
    count = min(len(x) for x in stacked.values())
    rows = [
        run_tflite(variant["file"], variant["io"], {k: x[i : i + 1] for k, x in stacked.items()})
        for i in range(count)
    ]
    names = [o["onnx"] for o in variant["io"]["outputs"]]
    arrays: dict[str, Any] = {f"out{k}": np.concatenate([row[k] for row in rows]) for k in range(len(names))}
    np.savez(path, **arrays)
    return str(path)


def _channels_last(samples: str | None, folder: Path) -> dict[str, str]:
    """The check samples as one channels-last .npy per input (onnx2tf's sample layout)."""
    import numpy as np

    if not samples:
        return {}
    out = {}
    for k, (name, x) in enumerate(np.load(samples).items()):
        x = x.astype(np.float32)
        if x.ndim >= 3:
            x = x.transpose(0, *range(2, x.ndim), 1)
        path = folder / f"traced-{k}.npy"
        np.save(path, np.ascontiguousarray(x))
        out[name] = str(path)
    return out


def _identity_norm(path: str) -> tuple[Any, Any]:
    """mean 0, std 1 broadcast over the sample's rank: the samples already are the model's input."""
    import numpy as np

    rank = np.load(path, mmap_mode="r").ndim
    return np.zeros([1] * rank, dtype=np.float32), np.ones([1] * rank, dtype=np.float32)


def np_first(path: str) -> Any:
    """The first calibration sample back in the ONNX layout (the files are channels-last)."""
    import numpy as np

    x = np.load(path)[:1]
    return np.ascontiguousarray(x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1))) if x.ndim >= 3 else x


def _perm(tflite_shape: list[int], onnx_shape: list[int]) -> list[int] | None:
    """The permutation taking ONNX layout to TFLite's (None: same), or raises when neither fits."""
    if list(tflite_shape) == list(onnx_shape):
        return None
    rank = len(onnx_shape)
    if rank >= 3:
        perm = [0, *range(2, rank), 1]  # channels last
        if [onnx_shape[i] for i in perm] == list(tflite_shape):
            return perm
    raise ValueError(f"TFLite shape {tflite_shape} does not match ONNX {onnx_shape}")


def io_map(model_path: str, described: dict[str, Any]) -> dict[str, Any]:
    """Each TFLite input/output tied to its ONNX tensor (by name, else by position) and layout."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}

    def shape(v: Any) -> list[int]:
        return [d.dim_value for d in v.type.tensor_type.shape.dim]

    onnx_in = [(v.name, shape(v)) for v in model.graph.input if v.name not in inits]
    onnx_out = [(v.name, shape(v)) for v in model.graph.output]

    def tie(tensors: list[dict[str, Any]], names: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
        out = []
        for i, t in enumerate(tensors):
            match = next((n for n in names if n[0] == t["name"] or t["name"].endswith(n[0])), None)
            if match is None:
                candidates = [n for n in names if sorted(n[1]) == sorted(t["shape"])]
                match = candidates[0] if len(candidates) == 1 else names[i]
            out.append({**t, "onnx": match[0], "perm": _perm(t["shape"], match[1])})
        return out

    inputs = tie(described["inputs"], onnx_in)
    outputs = tie(described["outputs"], onnx_out)
    order = [n for n, _ in onnx_out]
    outputs.sort(key=lambda o: order.index(o["onnx"]))
    return {"inputs": inputs, "outputs": outputs}


def run_tflite(path: str, io: dict[str, Any], feed: dict[str, Any]) -> list[Any]:
    """One inference in ONNX layout and dtypes (quantized I/O through the model's own scale/zero point)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    interpreter.allocate_tensors()
    details = {d["name"]: d for d in interpreter.get_input_details()}
    for spec in io["inputs"]:
        x = np.asarray(feed[spec["onnx"]], dtype=np.float32)
        if spec["perm"]:
            x = x.transpose(spec["perm"])
        if spec["dtype"] not in ("float32", "float16"):
            info = np.iinfo(spec["dtype"])
            x = np.clip(np.round(x / spec["scale"] + spec["zero_point"]), info.min, info.max)
        interpreter.set_tensor(details[spec["name"]]["index"], x.astype(spec["dtype"]))
    interpreter.invoke()
    outs = {d["name"]: d for d in interpreter.get_output_details()}
    result = []
    for spec in io["outputs"]:
        y = interpreter.get_tensor(outs[spec["name"]]["index"])
        if spec["dtype"] not in ("float32", "float16"):
            y = (y.astype(np.float32) - spec["zero_point"]) * spec["scale"]
        if spec["perm"]:
            y = y.transpose(np.argsort(spec["perm"]))
        result.append(np.asarray(y, dtype=np.float32))
    return result


def main(argv: list[str]) -> int:
    from importlib.metadata import version

    request = json.loads(Path(argv[0]).read_text())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        result = convert(request)
        result.update(ok=True, onnx2tf=version("onnx2tf"), tensorflow=version("tensorflow"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        traceback.print_exc()
        lines = str(exc).strip().splitlines()
        result = {"ok": False, "error": (lines[0] if lines else type(exc).__name__)[:400]}
    Path(argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
