"""Benchmark: validating 200 specs (goal < 2 s) and CLI start-up (goal < 0.5 s). Prints; asserts nothing.

    python bench/validate.py [--specs 200] [--runs 5]

The specs live in a temporary repository with real ONNX models (the onnx package's light SqueezeNet and
PP-OCR's direction classifier, which has dynamic dimensions). Model files get an old mtime, as committed
files have. A file changed within the racy window of a run is not cached (reconciler.state.statcache),
so the cold run summarizes and validates everything and the timed warm runs read the caches.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGETS = ["cpu", "rk3588", "rk3576", "intel-npu", "qualcomm-htp-v75"]
SPEC = """\
# yaml-language-server: $schema=../schemas/deployment.schema.json
apiVersion: npuctl/v1
kind: Deployment
{extends}metadata:
  name: {name}
  labels: {{team: bench, index: "{index}"}}
spec:
  target: {target}
{body}"""
SQUEEZE_BODY = """\
  model: {{path: ../models/squeezenet.onnx}}
  inputs:
    data_0: [1, 3, 224, 224]
  shape_variants: [{{data_0: [1, 3, 224, 224]}}]
  preprocess:
    {{input: data_0, layout: nhwc, dtype: uint8, mean: [123.7, 116.3, 103.5], std: [58.4, 57.1, 57.4]}}
  quantization:
    mode: ptq
    activations: {act}
    calibration: {{data: ../data/calib, samples: {samples}, method: minmax}}
    sensitive_layers: {{keep: fp16, nodes: ["n1*", "n2"], op_types: [Softmax]}}
  compile: {{cores: 2, optimization_level: 3}}
  evaluate: {{data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 2, runs: 10}}
  slo:
    latency_ms: {{p90: 20, p99: 40}}
    accuracy: {{max_drop: 0.01}}
    size_mb: 5
"""
CLS_BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
metadata: {labels: {model: cls}}
spec:
  model: {path: ../../models/cls.onnx}
  inputs: {x: [1, 3, 48, 192]}
  quantization: {mode: fp16, sensitive_layers: {op_types: [Softmax]}}
"""


def _package_dir(name: str) -> Path:
    found = importlib.util.find_spec(name)
    assert found is not None and found.submodule_search_locations
    return Path(found.submodule_search_locations[0])


def make_repo(root: Path, count: int) -> None:
    (root / ".git").mkdir(parents=True)
    (root / "specs" / "bases").mkdir(parents=True)
    (root / "models").mkdir()
    shutil.copyfile(
        _package_dir("onnx") / "backend/test/data/light/light_squeezenet.onnx",
        root / "models/squeezenet.onnx",
    )
    shutil.copyfile(
        _package_dir("rapidocr_onnxruntime") / "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        root / "models/cls.onnx",
    )
    for model in (root / "models").iterdir():
        os.utime(model, (time.time() - 3600, time.time() - 3600))
    (root / "data/calib").mkdir(parents=True)
    (root / "data/eval").mkdir(parents=True)
    (root / "data/eval/labels.txt").write_text("0\n")
    (root / "specs/bases/cls.yaml").write_text(CLS_BASE)
    for i in range(count):
        target = TARGETS[i % len(TARGETS)]
        if i % 4 == 3:  # a quarter share a base through extends
            text = SPEC.format(
                extends="extends: bases/cls.yaml\n", name=f"cls-{i}", index=i, target=target, body=""
            )
        else:
            body = SQUEEZE_BODY.format(act="uint8" if i % 2 else "int16", samples=10 + i)
            text = SPEC.format(extends="", name=f"squeeze-{i}", index=i, target=target, body=body)
        (root / "specs" / f"spec-{i:03d}.yaml").write_text(text)


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def show(label: str, seconds: list[float], goal: float) -> None:
    best, median = min(seconds), statistics.median(seconds)
    verdict = "meets" if median < goal else "MISSES"
    times = f"median {median * 1000:8.1f} ms   best {best * 1000:8.1f} ms"
    print(f"{label:<52} {times}   goal < {goal * 1000:.0f} ms: {verdict}")


def command() -> list[str]:
    script = shutil.which("npuctl")
    return [script] if script else [sys.executable, "-m", "reconciler"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--specs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory(prefix="npuctl-bench-") as tmp:
        root = Path(tmp) / "repo"
        make_repo(root, args.specs)
        os.chdir(root)
        from reconciler.spec import _summary, check

        start = time.perf_counter()
        reports = check([root / "specs"], root)
        cold = time.perf_counter() - start
        invalid = [str(e) for r in reports for e in r.errors]
        if invalid:
            print("unexpected errors:\n" + "\n".join(invalid[:10]))
            return 1
        print(f"{len(reports)} specs in {root}")
        print(f"{'in-process, cold (onnx import, summaries written)':<52} {cold * 1000:8.1f} ms")

        def warm() -> None:
            _summary._memo.clear()
            check([root / "specs"], root)

        show(f"in-process check() of {len(reports)} specs, cached summaries", timed(warm, args.runs), 2.0)
        cli = command()
        run = lambda *a: subprocess.run([*cli, *a], cwd=root, capture_output=True, check=False)  # noqa: E731
        result = run("validate")
        if result.returncode != 0:
            print(result.stdout.decode()[-2000:], result.stderr.decode()[-2000:])
            return 1
        show(
            f"`npuctl validate` of {len(reports)} specs (new process)",
            timed(lambda: run("validate"), args.runs),
            2.0,
        )
        show("`npuctl --help` start-up", timed(lambda: run("--help"), args.runs), 0.5)
        one = str(root / "specs" / "spec-000.yaml")
        show(
            "`npuctl validate specs/spec-000.yaml` (one spec)",
            timed(lambda: run("validate", one), args.runs),
            0.5,
        )
        print(f"command: {' '.join(cli)}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
