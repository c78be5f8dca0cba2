"""check + rewrite time on the largest real model (PP-OCRv4 rec, the largest file shipped with
rapidocr-onnxruntime) for the targets the acceptance names.

Imports the model at 1x3x48x320, then times the check stage's placement (analysis, constraints, estimate)
and the rewrite stage (every rewrite, each verified on ONNX Runtime) for Qualcomm HTP v75 and RK3588.
Goal (printed, not asserted): check + rewrite < 5 s per target on a 2-core machine.
Run: python bench/check.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--targets", nargs="*", default=["qualcomm-htp-v75", "rk3588"])
    args = parser.parse_args()

    import importlib.util

    from backends.catalog import target
    from backends.passes import estimate as E
    from backends.passes import placement as P
    from backends.passes.importer import import_model
    from backends.passes.rewrite.stage import rewrite_model

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.submodule_search_locations
    models = Path(spec.submodule_search_locations[0]) / "models"
    path = max(models.glob("*.onnx"), key=lambda p: p.stat().st_size)
    model, _ = import_model(path, {"x": [1, 3, 48, 320]}, log=lambda _: None)
    print(
        f"model: {path.name} ({path.stat().st_size / 1e6:.1f} MB), {len(model.graph.node)} nodes after import"
    )
    quant = {"mode": "ptq", "weights": "int8"}
    for tid in args.targets:
        tgt = target(tid)
        check_s, rewrite_s = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = P.compute(model, tgt, quant)
            t1 = time.perf_counter()
            result = rewrite_model(model, tgt, report["precision"], {}, log=lambda _: None)
            t2 = time.perf_counter()
            check_s.append(t1 - t0)
            rewrite_s.append(t2 - t1)
        c, r = statistics.median(check_s), statistics.median(rewrite_s)
        verdict = "meets" if c + r < GOAL_S else "misses"
        print(
            f"{tid:18s} check {c:5.2f} s + rewrite {r:5.2f} s = {c + r:5.2f} s ({verdict} the {GOAL_S:g} s goal); "
            f"coverage {result.coverage_before:.1%} -> {result.coverage_after:.1%}, "
            f"{len(result.fired)} rewrites fired, max abs diff {result.max_abs_diff:g}"
        )
    del E


if __name__ == "__main__":
    main()
