"""Benchmark: one real model, float and int8, on ONNX Runtime and on OpenVINO side by side, with ratios.
Prints; asserts nothing.

    python bench/backends.py [--model rec|cls] [--runs 100] [--threads 2]

The model is PP-OCRv4's text recognizer (or PP-OCR's direction classifier) from rapidocr-onnxruntime,
with static shapes; calibration and evaluation inputs are the rendered text lines in examples/ppocr,
normalized as PaddleOCR does ((x/255 - 0.5) / 0.5, BGR, NCHW). The variants:

- float: the imported ONNX on ORT (all graph optimizations) and on OpenVINO CPU with
  INFERENCE_PRECISION_HINT f32 set explicitly (the CPU default is bf16 on AMX hosts);
- int8 (ORT): ONNX Runtime static QDQ, U8S8 per channel (the host-friendly int8 form);
- int8 (NNCF): nncf.quantize on the ONNX (QDQ out), on both runtimes.

Every variant is timed by the shared harness (backends.sdk.harness.time_runs) in this process, one after the
other, on the same input; fidelity is top-1 agreement of the per-step character argmax with float ORT.
Timings on a shared 2-core VM vary by +-30 %: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", [1, 3, 48, 320]),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", [1, 3, 48, 192]),
}
IMAGES = ROOT / "examples" / "ppocr" / "images" / "rec"


def _model_path(name: str) -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("rapidocr-onnxruntime is not installed (pip install -e '.[examples]')")
    return Path(spec.submodule_search_locations[0]) / "models" / name


def _images(folder: Path, shape: list[int], limit: int) -> list[np.ndarray]:
    from PIL import Image

    out = []
    for path in sorted(folder.glob("*.png"))[:limit]:
        with Image.open(path) as img:
            rgb = np.asarray(img.convert("RGB").resize((shape[3], shape[2])), dtype=np.float32)
        bgr = rgb[..., ::-1]
        out.append(((bgr / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[np.newaxis].astype(np.float32))
    return out


def _ort(model: Path, threads: int) -> Callable[[dict[str, Any]], Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return lambda feed: sess.run(None, feed)[0]


def _openvino(model: Path, threads: int) -> Callable[[dict[str, Any]], Any]:
    import openvino as ov

    core = ov.Core()
    props = {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": str(threads),
        "NUM_STREAMS": "1",
    }
    compiled = core.compile_model(core.read_model(str(model)), "CPU", props)
    request = compiled.create_infer_request()
    output = compiled.outputs[0]
    return lambda feed: request.infer(feed)[output]


def _ort_int8(model: Path, calib: list[np.ndarray], name: str, out: Path) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calib)

        def get_next(self) -> dict[str, np.ndarray] | None:
            item = next(self.items, None)
            return None if item is None else {name: item}

    quantize_static(
        str(model),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    return out


def _nncf_int8(model: Path, calib: list[np.ndarray], name: str, out: Path) -> Path:
    import nncf
    import onnx

    quantized = nncf.quantize(
        onnx.load(str(model)), nncf.Dataset([{name: c} for c in calib]), subset_size=len(calib)
    )
    onnx.save(quantized, str(out))
    return out


def _agreement(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    hits = [
        float((r.argmax(-1) == o.reshape(r.shape).argmax(-1)).mean())
        for r, o in zip(reference, outputs, strict=True)
    ]
    return float(np.mean(hits))


def _cell(row: tuple[float, float] | str) -> str:
    return f"{row[0]:.3f}" if isinstance(row, tuple) else "failed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="rec")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import onnxruntime
    import openvino

    from backends.passes.importer import import_model
    from backends.sdk.harness import time_runs

    file_name, shape = MODELS[args.model]
    calib = _images(IMAGES / "calib", shape, 32)
    evals = _images(IMAGES / "eval", shape, 32)
    with tempfile.TemporaryDirectory(prefix="npuctl-bench-backends-") as tmp:
        folder = Path(tmp)
        imported, _ = import_model(_model_path(file_name), {"x": shape}, lambda _: None)
        float_model = folder / "float.onnx"
        float_model.write_bytes(imported.SerializeToString())
        name = imported.graph.input[0].name
        models = {
            "float": float_model,
            "int8 ORT QDQ U8S8": _ort_int8(float_model, calib, name, folder / "ort_int8.onnx"),
            "int8 NNCF": _nncf_int8(float_model, calib, name, folder / "nncf_int8.onnx"),
        }
        runtimes = {"onnxruntime": _ort, "openvino": _openvino}
        reference = [_ort(float_model, args.threads)({name: e}) for e in evals]
        rows: dict[tuple[str, str], tuple[float, float] | str] = {}
        for variant, path in models.items():
            for runtime, make in runtimes.items():
                try:
                    infer = make(path, args.threads)
                except Exception as exc:
                    rows[(variant, runtime)] = str(exc).strip().splitlines()[-1][:100]
                    continue
                timing = time_runs(infer, {name: evals[0]}, args.warmup, args.runs)
                p50 = timing.summary_ms()["p50"]
                agree = _agreement(reference, [np.asarray(infer({name: e})) for e in evals])
                rows[(variant, runtime)] = (p50, agree)

    print(f"model: {file_name} {shape}, {args.runs} runs after {args.warmup} warm-up, {args.threads} threads")
    print(f"onnxruntime {onnxruntime.__version__}, openvino {openvino.get_version()} (CPU, f32 hint)")
    print(
        f"{'variant':<20} {'ORT p50 ms':>11} {'OV p50 ms':>10} {'OV/ORT':>7} {'ORT fid.':>9} {'OV fid.':>8}"
    )
    failures = []
    for variant in models:
        ort, ov = rows[(variant, "onnxruntime")], rows[(variant, "openvino")]
        cells = [_cell(ort), _cell(ov)]
        ratio = f"{ov[0] / ort[0]:.2f}" if isinstance(ort, tuple) and isinstance(ov, tuple) else "-"
        fids = [f"{r[1]:.4f}" if isinstance(r, tuple) else "-" for r in (ort, ov)]
        print(f"{variant:<20} {cells[0]:>11} {cells[1]:>10} {ratio:>7} {fids[0]:>9} {fids[1]:>8}")
        failures += [
            f"  {variant} on {rt}: {r}"
            for rt, r in (("onnxruntime", ort), ("openvino", ov))
            if isinstance(r, str)
        ]
    print("int8 / float latency ratios:")
    for runtime in runtimes:
        base = rows[("float", runtime)]
        parts = []
        for v in models:
            row = rows[(v, runtime)]
            if v != "float" and isinstance(row, tuple) and isinstance(base, tuple):
                parts.append(f"{v} {row[0] / base[0]:.2f}")
        print(f"  {runtime:<12} {', '.join(parts) or '-'}")
    if failures:
        print("could not compile:")
        print("\n".join(failures))
    print("fidelity: top-1 agreement of the per-step argmax with float ONNX Runtime on 32 rendered lines")


if __name__ == "__main__":
    main()
