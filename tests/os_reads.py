"""The operating system's account of reads from one file, and a valid ONNX model large enough to
count them: shared by tests/e2e/test_large_model_reads.py and bench/noop.py.

`strace -f -y` records every read() of every process a command starts (stage children too) with the
path behind the descriptor; the bytes those calls returned are summed for one file. /proc/<pid>/io
cannot say which file was read.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

_READ = re.compile(r"^\d+\s+\w+\(\d+<([^>]*)>.*\)\s+=\s+(\d+)")


def strace_prefix(log: Path) -> tuple[str, ...]:
    """argv prefix that runs a command under strace, logging every read-family call to `log`."""
    return ("strace", "-f", "-qq", "-y", "-o", str(log), "-e", "trace=read,pread64,readv,preadv,preadv2")


def bytes_read(log: Path, target: Path) -> int:
    """Bytes the read calls in `log` returned from the file `target` (its real path)."""
    real = str(target.resolve())
    total = 0
    with log.open() as fh:
        for line in fh:
            found = _READ.match(line)
            if found and found[1] == real:
                total += int(found[2])
    return total


def large_model(path: Path, megabytes: int) -> int:
    """A valid ONNX model, one MatMul with a `megabytes` initializer, written to `path` with a file
    time in the past (not "just modified": its digest may be cached like any other file); its size."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    columns = megabytes * (1 << 20) // (4 * 1024)
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
    past = time.time_ns() - 10**10
    os.utime(path, ns=(past, past))
    return path.stat().st_size


CHECK_CALLS = "stat,statx,newfstatat,lstat,openat"
"""The calls a tool checks or opens a file with (`file_checks`)."""
_CHECK = re.compile(r'^\d+\s+(\w+)\((?:AT_FDCWD|\d+(?:<[^>]*>)?),?\s*"([^"]*)"')


def checks_prefix(log: Path) -> tuple[str, ...]:
    """argv prefix that runs a command under strace, logging every stat- and open-family call to `log`."""
    return ("strace", "-f", "-qq", "-o", str(log), "-e", f"trace={CHECK_CALLS}")


def file_checks(log: Path, folder: Path) -> tuple[int, int]:
    """(every stat/open call in `log`, those naming a path inside `folder`, the command's working
    folder: relative paths count as inside)."""
    real = str(folder.resolve())
    total = inside = 0
    with log.open() as fh:
        for line in fh:
            found = _CHECK.match(line)
            if found is None:
                continue
            path = found[2]
            if not path:  # an fstat of an open descriptor (AT_EMPTY_PATH): no file looked up
                continue
            total += 1
            inside += not path.startswith("/") or path == real or path.startswith(real + "/")
    return total, inside
