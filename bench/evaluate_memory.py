"""Evaluate's memory against the size of the evaluation set (PP-OCRv4 det 640x640, fidelity, ORT CPU).

evaluate reads, ships, runs and scores the evaluation set one sample at a time (the samples file and
the runner's outputs are written and read member by member; the float reference and the scoring
take one sample of each model at a time), so its peak memory does not grow with the number of
samples. Before, it held every decoded frame and both models' outputs: 837 MB at 60 samples here,
against 319 MB once streamed.

The same spec is applied with a small and a large evaluation folder, each `npuctl apply` in its own
process, side by side; the peak RSS of the process tree and the growth per extra sample are printed
next to the size of one decoded frame (what holding the inputs alone would add per sample).

Run: python bench/evaluate_memory.py [--small 20] [--large 100]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "bench"))

import text_images  # noqa: E402

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: det-{count}}}
spec:
  model: {{package: rapidocr_onnxruntime, path: models/ch_PP-OCRv4_det_infer.onnx}}
  target: cpu
  inputs: {{x: [1, 3, 640, 640]}}
  preprocess: {{layout: nhwc, dtype: uint8, mean: [123.675, 116.28, 103.53], std: [58.395, 57.12, 57.375]}}
  evaluate: {{data: ../data/eval{count}, runs: 3, warmup: 1}}
  slo: {{accuracy: {{max_drop: 0.01}}}}
"""

_MEASURE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)"
)


def _repo(root: Path, counts: list[int]) -> None:
    from PIL import Image

    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "specs").mkdir()
    _, photos = text_images.photos()
    frames = text_images.generate(photos, max(counts), seed=3)
    for count in counts:
        folder = root / "data" / f"eval{count}"
        folder.mkdir(parents=True)
        for i, frame in enumerate(frames[:count]):
            Image.fromarray(frame[:, :, ::-1]).save(folder / f"{i:04d}.png")
        (root / "specs" / f"det-{count}.yaml").write_text(SPEC.format(count=count))


def _peak_mb(root: Path, spec: str) -> float:
    """Peak RSS (MB) of `npuctl apply SPEC` and its runner, in a fresh process that measures only them."""
    cmd = [sys.executable, "-c", _MEASURE, sys.executable, "-m", "reconciler", "apply", spec]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=True)
    kb, code = done.stdout.split()
    if int(code) not in (0, 3):
        raise SystemExit(f"npuctl apply {spec} exited {code}")
    return int(kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npuctl-bench-evalmem-") as tmp:
        root = Path(tmp)
        _repo(root, [args.small, args.large])
        for count in (args.small, args.large):  # build everything before evaluate up front, untimed
            _peak_mb(root, f"specs/det-{count}.yaml")
        for count in (args.small, args.large):  # now only evaluate runs: a runs change rebuilds it alone
            spec = root / "specs" / f"det-{count}.yaml"
            spec.write_text(spec.read_text().replace("runs: 3", "runs: 4"))
        small = _peak_mb(root, f"specs/det-{args.small}.yaml")
        large = _peak_mb(root, f"specs/det-{args.large}.yaml")
        lock = json.loads((root / "specs" / f"det-{args.large}.lock.json").read_text())
        drop = lock["variants"]["default"]["verdicts"][0]["value"]
    per_sample = (large - small) / (args.large - args.small)
    frame = 640 * 640 * 3 / 2**20
    print(f"evaluate of PP-OCRv4 det 640x640 (fidelity: {drop:.4f} drop), peak RSS of npuctl apply + runner:")
    print(f"  {args.small:>4} samples: {small:8.1f} MB")
    print(f"  {args.large:>4} samples: {large:8.1f} MB")
    print(
        f"  growth per extra sample: {per_sample:.2f} MB; one decoded frame is {frame:.2f} MB "
        f"(ratio {per_sample / frame:.2f}; holding both models' outputs would add ~{2 * 640 * 640 * 4 / 2**20:.1f} MB)"
    )


if __name__ == "__main__":
    main()
