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
    import onnx2tf

    calibration: dict[str, str] = request["calibration"]
    _sample_file(calibration)
    out = Path(request["output"])
    onnx2tf.convert(
        input_onnx_file_path=request["model"],
        output_folder_path=str(out),
        output_integer_quantized_tflite=bool(calibration),
        custom_input_op_name_np_data_path=[
            [name, path, *_identity_norm(path)] for name, path in calibration.items()
        ]
        or None,
        quant_type=request.get("quant_type", "per-channel"),
        non_verbose=True,
    )
    stem = Path(request["model"]).stem
    variants = {}
    for variant, suffix in VARIANTS.items():
        path = out / f"{stem}{suffix}"
        if path.is_file():
            described = _describe(path)
            described["io"] = io_map(request["model"], described)
            variants[variant] = {"file": str(path), **described}
    checks = {}
    if calibration:
        feed = {name: np_first(path) for name, path in calibration.items()}
        want = reference_outputs(request["model"], feed)
        for name, described_variant in variants.items():
            checks[name] = compare(want, described_variant, feed)
    return {"variants": variants, "checks": checks}


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


def reference_outputs(model_path: str, feed: dict[str, Any]) -> list[Any]:
    """The ONNX model's outputs on `feed` (ONNX Runtime CPU): what every variant is compared with."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    outputs: list[Any] = session.run(None, {k: np.asarray(v, dtype=np.float32) for k, v in feed.items()})
    return outputs


def compare(want: list[Any], variant: dict[str, Any], feed: dict[str, Any]) -> dict[str, Any]:
    """The variant against the ONNX model's outputs `want`, one calibration sample."""
    import numpy as np

    got = run_tflite(variant["file"], variant["io"], feed)
    a = np.concatenate([np.ravel(x).astype(np.float64) for x in got])
    b = np.concatenate([np.ravel(x).astype(np.float64) for x in want])
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return {
        "cosine": float(a @ b / denom) if denom else float(np.allclose(a, b)),
        "max_abs_diff": float(np.max(np.abs(a - b))) if a.size else 0.0,
        "max_abs_reference": float(np.max(np.abs(b))) if b.size else 0.0,
    }


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
