"""Folded vs unfolded preprocessing, side by side, on real models with ONNX Runtime.

For each model: the same raw input (uint8 NHWC BGR, PP-OCR's mean/std; and float32 NCHW for the folded
Conv case) through (a) the folded form (std, color swap and, where exact, mean folded into the first
Conv) and (b) the unfolded form (explicit Gather/Sub/Div before the model). Prints the median latency of
each and the ratio folded/unfolded (goal: <= 1, printed, not asserted), plus the node counts.
Run: python bench/preprocess.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _session(model: object) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # two sessions alternate
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]


def _side_by_side(a: object, b: object, feeds: dict[str, object], runs: int) -> tuple[float, float]:
    """Median ms of two sessions, alternating run by run so machine noise hits both alike."""
    for _ in range(10):
        a.run(None, feeds)  # type: ignore[attr-defined]
        b.run(None, feeds)  # type: ignore[attr-defined]
    ta, tb = [], []
    for _ in range(runs):
        for session, samples in ((a, ta), (b, tb)):
            t = time.perf_counter()
            session.run(None, feeds)  # type: ignore[attr-defined]
            samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    import importlib.util

    import onnx

    from backends.passes.importer import import_model
    from backends.passes.preprocess import stage as PP

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.submodule_search_locations
    rapid = Path(spec.submodule_search_locations[0]) / "models"
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    cases = [
        ("PP-OCRv4 rec", rapid / "ch_PP-OCRv4_rec_infer.onnx", "x", [1, 3, 48, 320], "uint8", "nhwc"),
        ("PP-OCRv4 det", rapid / "ch_PP-OCRv4_det_infer.onnx", "x", [1, 3, 320, 320], "uint8", "nhwc"),
        (
            "PP-OCR cls",
            rapid / "ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "x",
            [1, 3, 48, 192],
            "float32",
            "nchw",
        ),
        (
            "squeezenet (light)",
            light / "light_squeezenet.onnx",
            "data_0",
            [1, 3, 224, 224],
            "float32",
            "nchw",
        ),
    ]
    print(
        f"{'model':20s} {'input':14s} {'folded ms':>10s} {'unfolded ms':>12s} {'ratio':>6s}  nodes (orig/folded/unfolded)"
    )
    for label, path, name, shape, dtype, layout in cases:
        model, _ = import_model(path, {name: shape}, log=lambda _: None)
        pre = {
            "layout": layout,
            "dtype": dtype,
            "color": {"from": "bgr", "to": "rgb"},
            "mean": [127.5] * 3,
            "std": [127.5] * 3,
        }
        folded, plan, _ = PP.preprocess_model(model, pre, fold=True)
        unfolded, _, _ = PP.preprocess_model(model, pre, fold=False)
        raw = PP.random_raw(plan, seed=1)
        feeds = {plan.input: raw}
        f, u = _side_by_side(_session(folded.model), _session(unfolded.model), feeds, args.runs)
        counts = f"{len(model.graph.node)}/{len(folded.model.graph.node)}/{len(unfolded.model.graph.node)}"
        print(
            f"{label:20s} {dtype + ' ' + layout:14s} {f:10.3f} {u:12.3f} {f / u:6.2f}  {counts}  "
            f"folded ops added: {folded.added_ops}"
        )


if __name__ == "__main__":
    main()
