"""A first `apply` of a 300 MB model reads the model file's bytes at most twice (the shared sha256 and
the import stage's one parse) and peaks under 3x its size above a small model's apply.

Counted by the operating system, not by npuctl: `strace -f -y` records every read() of every process
the CLI starts (the stage child included) with the path behind the descriptor, and the bytes those
calls returned are summed for the model file. /proc/<pid>/io cannot say which file was read (rchar
counts every read, of the store objects too, and read_bytes only page-cache misses, so a file read
twice from the cache counts once). Peak memory is the largest process's ru_maxrss (getrusage of the
children), against the same apply of the digits model. The target is Ascend 310P: its compiler (ATC)
cannot be installed here, so compile writes the bundle and evaluate is not run; every stage that reads
the source model runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits

SIZE_MB = 300
_READ = re.compile(r"^\d+\s+\w+\(\d+<([^>]*)>.*\)\s+=\s+(\d+)")
WRAPPER = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])\n"
)


def _large_model(path: Path) -> int:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    columns = SIZE_MB * (1 << 20) // (4 * 1024)
    weight = numpy_helper.from_array(np.full((1024, columns), 1e-3, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, columns])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    past = time.time_ns() - 10**10  # not "just modified": its digest may be cached like any other file
    os.utime(path, ns=(past, past))
    return path.stat().st_size


def _apply(repo: Path, *prefix: str) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes of the largest process, output) of `npuctl apply` in `repo`."""
    env = {**os.environ, "CI": "1"}
    cmd = [sys.executable, "-c", WRAPPER, *prefix, sys.executable, "-m", "reconciler", "apply"]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    code, peak = done.stdout.split()
    return int(code), int(peak) * 1024, done.stderr


@pytest.mark.slow
def test_first_apply_of_a_large_model_reads_it_twice_and_stays_under_3x(
    git_repo: Path, tmp_path: Path
) -> None:
    assert shutil.which("strace"), "strace is the OS's per-file read account (.ci/setup installs it)"
    small = tmp_path / "small"
    shutil.copytree(git_repo, small)
    copy_digits(small, eval_samples=4, calib_samples=0)
    (small / "specs" / "digits.yaml").write_text(
        DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: ascend-310p")
    )
    (git_repo / "models").mkdir()
    model = git_repo / "models" / "large.onnx"
    size = _large_model(model)
    (git_repo / "specs" / "large.yaml").write_text(
        "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: large}\nspec:\n"
        "  model: {path: ../models/large.onnx}\n  target: ascend-310p\n  inputs: {x: [1, 1024]}\n"
    )
    code, baseline, out = _apply(small)
    assert code in (0, 3), out
    log = tmp_path / "strace.log"
    trace = ("strace", "-f", "-qq", "-y", "-o", str(log), "-e", "trace=read,pread64,readv,preadv,preadv2")

    code, peak, out = _apply(git_repo, *trace)

    assert code in (0, 3), out
    assert "import built" in out and "check built" in out, out
    read = 0
    with log.open() as fh:
        for line in fh:
            found = _READ.match(line)
            if found and found[1] == str(model.resolve()):
                read += int(found[2])
    print(f"model {size} B: read {read} B ({read / size:.2f}x); peak {peak} B vs baseline {baseline} B")
    # twice: the shared sha256 and the import stage's parse; validation's summary reads the graph
    # structure only (a few hundred bytes here), never the weights
    assert size <= read <= 2 * size + (64 << 10), f"the model file was read {read / size:.2f} times"
    assert peak - baseline < 3 * size, f"peak {(peak - baseline) / size:.2f}x the model above the baseline"
