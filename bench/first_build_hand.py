"""The hand-written script bench/first_build.py compares a first `npuctl apply` with: what a user writes
with ONNX Runtime alone to get an int8 model of the same float model and its latency on the host CPU.

ONNX Runtime's documented recipe: the input's dimensions fixed to the samples' shape (what the spec's
`inputs` does; PP-OCR's symbolic shapes defeat quant_pre_process otherwise) and its opset raised to 13
where lower (per-channel QDQ needs it), `quant_pre_process` (its
quantizer warns without it; without its symbolic shape inference where that asserts, as it does on
PP-OCR's classifier), then
`quantize_static` (QDQ, per-channel weights, uint8 activations, int8 weights) on the same calibration
files, then a session on the int8 model timed `runs` times after `warmup` untimed runs on the first
calibration sample. No accuracy check, no lock file, no profile: the bare cost of doing it by hand.

Run: python bench/first_build_hand.py MODEL CALIB_DIR OUT_DIR WARMUP RUNS
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(model: Path, calib: Path, out: Path, warmup: int, runs: int) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import version_converter
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    files = sorted(calib.glob("*.npy"))
    proto = onnx.load(str(model))
    graph_input = proto.graph.input[0]
    name = graph_input.name
    for dim, size in zip(graph_input.type.tensor_type.shape.dim, np.load(files[0]).shape, strict=True):
        dim.Clear()
        dim.dim_value = size
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 13:
        proto = version_converter.convert_version(proto, 13)
    fixed = out / "fixed.onnx"
    onnx.save(proto, str(fixed))
    del proto

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter(files)

        def get_next(self) -> dict[str, np.ndarray] | None:
            path = next(self.left, None)
            return None if path is None else {name: np.load(path).astype(np.float32)}

    prepared, int8 = out / "prepared.onnx", out / "int8.onnx"
    try:
        quant_pre_process(str(fixed), str(prepared))
    except AssertionError:  # its symbolic shape inference refuses some exports (PP-OCR cls): skip it
        quant_pre_process(str(fixed), str(prepared), skip_symbolic_shape=True)
    quantize_static(
        str(prepared),
        str(int8),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    session = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    feed = {name: np.load(files[0]).astype(np.float32)}
    for _ in range(warmup):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    print(f"p50 {1000 * sorted(times)[len(times) // 2]:.3f} ms")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
