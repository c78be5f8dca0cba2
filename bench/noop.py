"""No-op speed: npuctl plan/apply over 100 built specs, against DVC on the equivalent pipeline.

Prepares a temp git repository with 100 specs on the real digits model (each spec differs, so each has
its own evaluate), applies them once, then times a no-op `npuctl plan` and `npuctl apply` side by side
with `dvc status` and `dvc repro` on a dvc.yaml with the same stages as commands and the same params and
deps. Then hashes a 1 GB model file twice and prints how many bytes the second run read.

Goals (printed, not asserted): no-op over 100 specs < 1 s and >= 10x faster than DVC; second hash reads 0 B.
Run: python bench/noop.py [--specs 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import copy_digits, git  # noqa: E402

DVC_SETUP_TIMEOUT_S = 900
"""DVC's first repro of a large pipeline is slow (it rewrites dvc.lock after every stage); past this
the comparison is reported as not measured rather than waited for."""

STAGES = ("import", "check", "rewrite", "preprocess", "quantize", "compile", "evaluate")
SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: digits-{i:03d}}}
spec:
  model: {{path: ../models/digits.onnx}}
  target: cpu
  inputs: {{image: [1, 1, 8, 8]}}
  evaluate: {{data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 0, runs: {runs}}}
  slo: {{latency_ms: {{p90: 50}}}}
"""


def _time(cmd: list[str], cwd: Path, repeat: int = 3) -> tuple[float, int]:
    """Median wall time of a command, and its exit code."""
    samples, rc = [], 0
    env = {**os.environ, "CI": "1"}
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        samples.append(time.perf_counter() - start)
        rc = done.returncode
    return statistics.median(samples), rc


def _npuctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "reconciler", *args]


def prepare(repo: Path, count: int) -> None:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo, eval_samples=20, calib_samples=0)
    (repo / "specs").mkdir()
    for i in range(count):
        (repo / "specs" / f"digits-{i:03d}.yaml").write_text(SPEC.format(i=i, runs=i + 1))


def prepare_dvc(repo: Path, count: int) -> None:
    """The same stages as DVC commands: each reads its params and deps and writes an output file."""
    lines = ["stages:"]
    params = []
    for i in range(count):
        params.append(f"d{i:03d}: {{runs: {i + 1}, target: cpu, shape: [1, 1, 8, 8]}}")
        previous = "models/digits.onnx"
        for stage in STAGES:
            out = f"out/{i:03d}/{stage}.bin"
            deps = [previous] + (["data/eval"] if stage == "evaluate" else [])
            lines += [
                f"  {stage}-{i:03d}:",
                f"    cmd: mkdir -p out/{i:03d} && cp {previous} {out}",
                "    deps: [" + ", ".join(deps) + "]",
                f"    params: [d{i:03d}]",
                f"    outs: [{out}]",
            ]
            previous = out
    (repo / "dvc.yaml").write_text("\n".join(lines) + "\n")
    (repo / "params.yaml").write_text("\n".join(params) + "\n")
    subprocess.run(["dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["dvc", "config", "core.analytics", "false"], cwd=repo, check=True)
    subprocess.run(
        ["dvc", "repro", "-q"], cwd=repo, check=True, capture_output=True, timeout=DVC_SETUP_TIMEOUT_S
    )


def bench_large_file(tmp: Path) -> None:
    """`plan` twice on a spec whose model is 1 GB: the second run must read none of it."""
    from reconciler.engine.plan import plan_all
    from reconciler.engine.workspace import Workspace
    from reconciler.spec import load_all
    from reconciler.state.hashcache import RACY_NS

    repo = tmp / "big-repo"
    prepare(repo, 1)
    big = repo / "models" / "digits.onnx"
    with big.open("wb") as fh:
        block = os.urandom(1 << 20)
        for _ in range(1024):
            fh.write(block)
    past = time.time_ns() - 10 * RACY_NS
    os.utime(big, ns=(past, past))
    specs, errors = load_all([repo / "specs"], repo)
    assert not errors, errors
    for run in (1, 2):
        ws = Workspace.open(repo)
        start = time.perf_counter()
        plan_all(ws, specs)
        read = ws.hasher.bytes_read
        ws.close()
        print(
            f"plan with a 1 GB model, run {run}: read {read / 2**20:.0f} MiB of it in {time.perf_counter() - start:.3f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--specs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "npuctl-repo"
        prepare(repo, args.specs)
        start = time.perf_counter()
        done = subprocess.run(
            _npuctl("apply"), cwd=repo, env={**os.environ, "CI": "1"}, capture_output=True, text=True
        )
        print(
            f"first apply of {args.specs} specs: {time.perf_counter() - start:.1f} s (exit {done.returncode})"
        )
        if done.returncode not in (0, 3):
            print(done.stdout[-2000:], done.stderr[-2000:])
        plan_s, plan_rc = _time(_npuctl("plan"), repo)
        apply_s, apply_rc = _time(_npuctl("apply"), repo)
        print(f"npuctl plan  (no-op): {plan_s:.3f} s (exit {plan_rc}, 0 = nothing to do)")
        print(f"npuctl apply (no-op): {apply_s:.3f} s (exit {apply_rc})")
        if shutil.which("dvc") is None:
            print("dvc not installed (pip install 'npuctl[bench]'): no comparison")
        else:
            dvc_repo = tmp / "dvc-repo"
            prepare(dvc_repo, 0)
            start = time.perf_counter()
            try:
                prepare_dvc(dvc_repo, args.specs)
            except subprocess.TimeoutExpired:
                print(
                    f"dvc: the first repro of {args.specs * len(STAGES)} stages did not finish in "
                    f"{DVC_SETUP_TIMEOUT_S} s; no ratio (try --specs 30)"
                )
                bench_large_file(tmp)
                return
            print(
                f"dvc: first repro of {args.specs * len(STAGES)} stages took {time.perf_counter() - start:.0f} s"
            )
            status_s, _ = _time(["dvc", "status", "-q"], dvc_repo)
            repro_s, _ = _time(["dvc", "repro", "-q"], dvc_repo)
            print(f"dvc status   (no-op): {status_s:.3f} s")
            print(f"dvc repro    (no-op): {repro_s:.3f} s")
            print(f"ratio dvc status / npuctl plan : {status_s / plan_s:.1f}x (goal >= 10x)")
            print(f"ratio dvc repro  / npuctl apply: {repro_s / apply_s:.1f}x (goal >= 10x)")
        print(
            f"goal: no-op over {args.specs} specs < 1 s: plan {'met' if plan_s < 1 else 'NOT met'}, "
            f"apply {'met' if apply_s < 1 else 'NOT met'}"
        )
        bench_large_file(tmp)


if __name__ == "__main__":
    main()
