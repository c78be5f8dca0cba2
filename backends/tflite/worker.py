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
import re
import sys
import traceback
from collections.abc import Callable
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
    """Each input and output: TFLite tensor name, shape, dtype, quantization, and its key in the serving
    signature (None without one): what io_map ties it to its ONNX tensor by."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    in_keys: dict[int, str] = {}
    out_keys: dict[int, str] = {}
    if interpreter.get_signature_list():  # per side: a graph output that is an input is one tensor
        runner = interpreter.get_signature_runner()
        in_keys = {d["index"]: k for k, d in runner.get_input_details().items()}
        out_keys = {d["index"]: k for k, d in runner.get_output_details().items()}

    def one(d: dict[str, Any], keys: dict[int, str]) -> dict[str, Any]:
        scale, zero = d.get("quantization", (0.0, 0))
        return {
            "name": d["name"],
            "signature": keys.get(d["index"]),
            "shape": [int(x) for x in d["shape"]],
            "dtype": str(d["dtype"].__name__),
            "scale": float(scale),
            "zero_point": int(zero),
        }

    return {
        "inputs": [one(d, in_keys) for d in interpreter.get_input_details()],
        "outputs": [one(d, out_keys) for d in interpreter.get_output_details()],
    }


def convert(request: dict[str, Any], running: Callable[[str], None] = lambda what: None) -> dict[str, Any]:
    """onnx2tf's float32 TFLite and SavedModel, then only the variant the spec asked for: TF's own
    converter on that SavedModel (what onnx2tf's -oiqt does for all five quantized variants at once).
    `running` is told each step a crash may end, so that the parent can name it."""
    import onnx2tf

    calibration: dict[str, str] = request["calibration"]
    out = Path(request["output"])
    keep = list(request.get("channels_last") or [])
    # onnx2tf traces the graph on these samples (on a downloaded image file without them)
    traced = calibration or _traced(request.get("check"), out.parent, request.get("names") or {}, keep)
    _sample_file(traced)
    onnx2tf.convert(
        input_onnx_file_path=request["model"],
        output_folder_path=str(out),
        output_signaturedefs=True,  # the SavedModel gets the serving signature TF's converter reads
        custom_input_op_name_np_data_path=[[n, p, *_identity_norm(p)] for n, p in traced.items()] or None,
        keep_nwc_or_nhwc_or_ndhwc_input_names=keep or None,
        non_verbose=True,
    )
    stem = Path(request["model"]).stem
    wanted = str(request["variant"])
    files = {"float32": signed_float(out / f"{stem}{VARIANTS['float32']}", out)}
    kept: dict[str, Any] = {}
    if wanted == "float16":
        files["float16"] = signed_float(out / f"{stem}{VARIANTS['float16']}", out, half=True)
    elif wanted in QUANTIZED:
        path = out / f"{stem}{VARIANTS[wanted]}"
        running(f"TF's {wanted} calibration and conversion{_loops_note(files['float32'])}")
        body, kept = quantized(out, request, wanted)
        path.write_bytes(body)
        files[wanted] = path
    elif wanted != "float32":
        raise ValueError(f"unknown TFLite variant {wanted!r}")
    variants = {}
    for variant, path in files.items():
        described = _describe(path)
        described["io"] = io_map(request["model"], described, request.get("names") or {}, keep)
        variants[variant] = {"file": str(path), **described}
    if kept:
        variants[wanted]["kept"] = kept
    outputs = {}
    if request.get("check"):
        for variant, described_variant in variants.items():
            outputs[variant] = check_outputs(
                described_variant, request["check"], out / f"check-{variant}.npz", variant in QUANTIZED
            )
    return {"variants": variants, "check_outputs": outputs}


QUANTIZED = ("full_int8", "int16_act")


def signed_float(path: Path, saved_model: Path, half: bool = False) -> Path:
    """onnx2tf's float32 (`half`: float16) TFLite, written again by TF's converter from the SavedModel
    when it has no serving signature (onnx2tf falls back to a concrete function where the Keras
    conversion raises, and that TFLite keys nothing): the float model then carries the keys the
    quantized variants, converted from the same SavedModel, are tied by."""
    from ai_edge_litert.interpreter import Interpreter

    if Interpreter(model_path=str(path)).get_signature_list():
        return path
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    if half:  # what onnx2tf's float16 file is: weights stored in half precision
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    path.write_bytes(converter.convert())
    return path


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
        _no_flex(body, variant)
        return body, {}
    if wide:
        raise ValueError(
            "float layers inside a 16x8 TFLite are not built (TF's selective quantizer is int8 only)"
        )
    from tensorflow.lite.python import convert as tf_convert

    converter._experimental_calibrate_only = True
    calibrated = converter.convert()
    kept_layout = set(request.get("channels_last") or [])
    first = {name: np_first(path, name in kept_layout) for name, path in request["calibration"].items()}
    kept = _sibling("keep_locate").locate(request["model"], calibrated, keep, first)
    denied = sorted({k["tflite"] for k in kept.values()})
    outputs = {d["name"] for d in tf.lite.Interpreter(model_content=calibrated).get_output_details()}
    if outputs & set(denied):
        # a kept layer that writes a model output leaves that output float: an int8 output would
        # quantize it again under one scale, which is what keeping it float is for (a decode's
        # concat). The quantizer keeps a fully quantized model's outputs integer, so the body is
        # quantized alone and the interface set after: inputs int8, outputs float32
        from tensorflow.lite.python import util as tf_util

        body = tf_convert.mlir_quantize(calibrated, fully_quantize=False, denylisted_nodes=denied)
        body = tf_util.modify_model_io_type(
            body, inference_input_type=io_type, inference_output_type=tf.float32
        )
    else:
        body = tf_convert.mlir_quantize(
            calibrated,
            fully_quantize=True,
            input_data_type=io_type,
            output_data_type=io_type,
            denylisted_nodes=denied,
        )
    _no_flex(body, variant)
    dtypes = _sibling("keep_locate").tensor_dtypes(body)
    for found in kept.values():
        found["dtype"] = dtypes.get(found["tflite"], "missing")
    return body, kept


def flex_ops(body: bytes) -> dict[str, int]:
    """Select-TF (Flex) ops in a TFLite flatbuffer: custom op code -> how many operators use it."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(body))
    codes = [
        (c.customCode or b"").decode() if isinstance(c.customCode, bytes) else str(c.customCode or "")
        for c in model.operatorCodes
    ]
    counts: dict[str, int] = {}
    for graph in model.subgraphs:
        for op in graph.operators:
            code = codes[op.opcodeIndex]
            if code.startswith("Flex"):
                counts[code] = counts.get(code, 0) + 1
    return counts


def loop_ops(body: bytes) -> dict[str, int]:
    """Control-flow operators (WHILE, IF) in a TFLite flatbuffer: op name -> how many. Read through
    the schema's lazy accessors: only the op codes and operators are touched, never the weights."""
    from tensorflow.lite.python import schema_py_generated as schema

    wanted = {schema.BuiltinOperator.WHILE: "WHILE", schema.BuiltinOperator.IF: "IF"}
    model = schema.Model.GetRootAs(body, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    names = [wanted.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode())) for c in codes]
    counts: dict[str, int] = {}
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for k in range(graph.OperatorsLength()):
            name = names[graph.Operators(k).OpcodeIndex()]
            if name:
                counts[name] = counts.get(name, 0) + 1
    return counts


def _loops_note(float_model: Path) -> str:
    """The words naming a float model's control flow, for the step announced before calibrating it:
    onnx2tf writes a recurrent layer it gets whole (LSTM, GRU, Loop, Scan) as a WHILE loop, and TF's
    int8 calibrator has crashed on those here (SIGSEGV). Empty without control flow."""
    found = loop_ops(float_model.read_bytes())
    if not found:
        return ""
    listed = ", ".join(f"{name} x{count}" for name, count in sorted(found.items()))
    return (
        f" of a float model running control flow ({listed}: onnx2tf's form of a recurrent layer left whole)"
    )


def _no_flex(body: bytes, variant: str) -> None:
    """An integer TFLite holding Select-TF ops is not an integer model: no NPU and no LiteRT build
    without the Flex delegate runs it, so the quantize fails here, naming the ops."""
    found = flex_ops(body)
    if found:
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(found.items()))
        raise ValueError(
            f"the {variant} TFLite holds {sum(found.values())} Select-TF (Flex) ops, which integer "
            f"kernels cannot run: {listed}"
        )


def _runtimes() -> Any:
    """benchprog's runtimes module (backends/runners/bench_runtimes.py), by path: the check runs a
    variant as evaluate will, through the same LiteRT session."""
    import importlib.util

    folder = Path(__file__).resolve().parents[1] / "runners"
    if str(folder) not in sys.path:
        sys.path.append(str(folder))  # its script-mode imports (bench_common) resolve there
    spec = importlib.util.spec_from_file_location("npuctl_bench_runtimes", folder / "bench_runtimes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    return np.load(path)


def _signature_feeds(saved_model: Path, calibration: dict[str, Any]) -> dict[str, Any]:
    """The calibration arrays keyed by the SavedModel signature's own input names, each in the dtype
    the signature declares (int64 token ids stay integers). The ONNX names given to onnx2tf are
    identifiers (backends.tflite.names), which the signature keeps: a name missing is an error, never
    a guess by position."""
    import tensorflow as tf

    _, spec = tf.saved_model.load(str(saved_model)).signatures["serving_default"].structured_input_signature
    missing = sorted(set(spec) ^ set(calibration))
    if missing:
        raise ValueError(
            f"the SavedModel's signature inputs {sorted(spec)} are not the ONNX inputs {sorted(calibration)}"
        )
    return {n: calibration[n].astype(spec[n].dtype.as_numpy_dtype) for n in spec}


def check_outputs(variant: dict[str, Any], samples: str, path: Path, integer: bool = False) -> str:
    """The variant's outputs (ONNX layout, float) on every check sample, stacked per output on a new
    first axis, saved to `path`: the parent scores them against the ONNX model with its own accuracy
    code. An `integer` variant runs on TFLite's reference kernels (bench_runtimes.LiteRtSession says
    why)."""
    import numpy as np

    stacked = dict(np.load(samples))
    count = min(len(x) for x in stacked.values())
    options = {"io": variant["io"], "reference_outputs": integer}
    session = _runtimes().LiteRtSession(Path(variant["file"]), options)
    rows = [session.outputs({k: x[i : i + 1] for k, x in stacked.items()}) for i in range(count)]
    names = [o["onnx"] for o in variant["io"]["outputs"]]
    # one new leading axis of samples: an output's own first axis need not be the batch ([T, N, C])
    arrays: dict[str, Any] = {f"out{k}": np.stack([row[k] for row in rows]) for k in range(len(names))}
    np.savez(path, **arrays)
    return str(path)


def _traced(samples: str | None, folder: Path, names: dict[str, str], keep: list[str]) -> dict[str, str]:
    """The check samples as one .npy per input in onnx2tf's sample layout (channels last, except for
    inputs the model already takes channels-last), keyed by the names onnx2tf sees."""
    import numpy as np

    if not samples:
        return {}
    new = {original: name for name, original in names.items()}
    out = {}
    for k, (name, x) in enumerate(np.load(samples).items()):
        name = new.get(name, name)
        if x.ndim >= 3 and name not in keep:
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


def np_first(path: str, channels_last: bool = False) -> Any:
    """The first calibration sample back in the ONNX layout (the files are channels-last; an input the
    model takes channels-last is already in its ONNX layout)."""
    import numpy as np

    x = np.load(path)[:1]
    if x.ndim < 3 or channels_last:
        return x
    return np.ascontiguousarray(x.transpose(0, x.ndim - 1, *range(1, x.ndim - 1)))


def _perm(tflite_shape: list[int], onnx_shape: list[int], kept: bool) -> list[int] | None:
    """The permutation taking ONNX layout to TFLite's (None: same), or raises when neither fits. An
    input the model takes channels-last (`kept`) must keep exactly its ONNX shape."""
    if list(tflite_shape) == list(onnx_shape):
        return None
    rank = len(onnx_shape)
    if rank >= 3 and not kept:
        perm = [0, *range(2, rank), 1]  # channels last
        if [onnx_shape[i] for i in perm] == list(tflite_shape):
            return perm
    raise ValueError(
        f"TFLite shape {tflite_shape} does not match ONNX {onnx_shape}"
        + (" (the model takes this input channels-last, and onnx2tf was told to keep it)" if kept else "")
    )


def _onnx_key(key: str | None, known: list[str], count: int) -> str | None:
    """The ONNX name a signature key stands for. onnx2tf's own TFLite keys tensors by the ONNX names;
    TF's converter, reading the SavedModel, keys outputs `output_<k>`: the k-th output of the Keras
    model onnx2tf builds from the ONNX graph's outputs in their order. A model without a signature
    ties only a lone tensor."""
    if key in known:
        return key
    if key is None:
        return known[0] if count == len(known) == 1 else None
    found = re.fullmatch(r"output_(\d+)", key)
    if found and count == len(known) and int(found.group(1)) < len(known):
        return known[int(found.group(1))]
    return key


def io_map(
    model_path: str, described: dict[str, Any], names: dict[str, str], keep: list[str]
) -> dict[str, Any]:
    """Each TFLite input/output tied to its ONNX tensor by the serving signature's key (the ONNX name
    onnx2tf was given; `names` maps it back to the model's own), and its layout. A tensor the
    signature does not name is an error, unless it is the only one on its side of a model without a
    signature: shapes and positions do not identify outputs (two [1, 2, 80, 80] maps differ)."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}

    def shape(v: Any) -> list[int]:
        return [d.dim_value for d in v.type.tensor_type.shape.dim]

    onnx_in = {v.name: shape(v) for v in model.graph.input if v.name not in inits}
    onnx_out = {v.name: shape(v) for v in model.graph.output}

    def tie(tensors: list[dict[str, Any]], known: dict[str, list[int]], what: str) -> list[dict[str, Any]]:
        out = []
        for t in tensors:
            key = _onnx_key(t.get("signature"), list(known), len(tensors))
            if key not in known:
                raise ValueError(
                    f"TFLite {what} {t['name']!r} has signature key {key!r}, which names no ONNX {what} "
                    f"({', '.join(sorted(known))})"
                )
            out.append({**t, "onnx": names.get(key, key), "perm": _perm(t["shape"], known[key], key in keep)})
        return out

    inputs = tie(described["inputs"], onnx_in, "input")
    outputs = tie(described["outputs"], onnx_out, "output")
    order = [names.get(n, n) for n in onnx_out]
    outputs.sort(key=lambda o: order.index(o["onnx"]))
    return {"inputs": inputs, "outputs": outputs}


def main(argv: list[str]) -> int:
    from importlib.metadata import version

    request = json.loads(Path(argv[0]).read_text())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def running(what: str) -> None:
        Path(argv[1]).write_text(json.dumps({"running": what}))

    try:
        result = convert(request, running)
        result.update(ok=True, onnx2tf=version("onnx2tf"), tensorflow=version("tensorflow"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        traceback.print_exc()
        lines = str(exc).strip().splitlines()
        result = {"ok": False, "error": (lines[0] if lines else type(exc).__name__)[:400]}
    Path(argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
