"""A first `apply` of a 300 MB model reads the model file's bytes at most twice (the shared sha256 and
the import stage's one parse) and peaks under 3x its size above a small model's apply.

Counted by the operating system, not by npuctl: `strace -f -y` records every read() of every process
the CLI starts (the stage child included) with the path behind the descriptor, and the bytes those
calls returned are summed for the model file. /proc/<pid>/io cannot say which file was read (rchar
counts every read, of the store objects too, and read_bytes only page-cache misses, so a file read
twice from the cache counts once). Peak memory is the largest process's ru_maxrss (getrusage of the
children), against the same apply of the digits model. One apply serves two specs of the one model:
Ascend 310P (its compiler, ATC, cannot be installed here, so compile writes the bundle and evaluate is
not run) and the cpu target, where ONNX Runtime checks, compiles (.ort) and evaluates it, each in a
process of its own besides the stage child: the import is one stage both share, so the file is still
parsed once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits
from tests.os_reads import bytes_read, large_model, strace_prefix

SIZE_MB = 300
TARGETS = ("ascend-310p", "cpu")
WRAPPER = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])\n"
)


def _apply(repo: Path, *prefix: str) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes of the largest process, output) of `npuctl apply` in `repo`."""
    env = {**os.environ, "CI": "1"}
    cmd = [sys.executable, "-c", WRAPPER, *prefix, sys.executable, "-m", "reconciler", "apply"]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    code, peak = done.stdout.split()
    return int(code), int(peak) * 1024, done.stderr


@pytest.mark.slow
def test_first_apply_of_a_large_model_reads_it_twice_and_stays_under_3x_on_both_targets(
    git_repo: Path, tmp_path: Path
) -> None:
    assert shutil.which("strace"), "strace is the OS's per-file read account (.ci/setup installs it)"
    small = tmp_path / "small"
    shutil.copytree(git_repo, small)
    copy_digits(small, eval_samples=4, calib_samples=0)
    for target in TARGETS:
        (small / "specs" / f"digits-{target}.yaml").write_text(
            DIGITS_SPEC.format(name=f"digits-{target}").replace("target: cpu", f"target: {target}")
        )
    (git_repo / "models").mkdir()
    model = git_repo / "models" / "large.onnx"
    size = large_model(model, SIZE_MB)
    for target in TARGETS:
        (git_repo / "specs" / f"large-{target}.yaml").write_text(
            f"apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {{name: large-{target}}}\nspec:\n"
            f"  model: {{path: ../models/large.onnx}}\n  target: {target}\n  inputs: {{x: [1, 1024]}}\n"
            "  evaluate: {warmup: 0, runs: 3}\n"
        )
    code, baseline, out = _apply(small)
    assert code in (0, 3), out
    log = tmp_path / "strace.log"
    code, peak, out = _apply(git_repo, *strace_prefix(log))

    assert code in (0, 3), out
    assert "large-ascend-310p [default] check built" in out, out
    assert "large-cpu [default] evaluate built" in out, out  # ORT's check, compile and evaluate ran
    read = bytes_read(log, model)
    print(f"model {size} B: read {read} B ({read / size:.2f}x); peak {peak} B vs baseline {baseline} B")
    # twice: the shared sha256 and the import stage's parse; validation's summary reads the graph
    # structure only (a few hundred bytes here), never the weights
    assert size <= read <= 2 * size + (64 << 10), f"the model file was read {read / size:.2f} times"
    assert peak - baseline < 3 * size, f"peak {(peak - baseline) / size:.2f}x the model above the baseline"
