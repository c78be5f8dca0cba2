"""benchprog's inputs and outputs: the samples file read one sample at a time, outputs written as they
are computed, a random feed when there are no samples, and who measured (the device's facts).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    from backends.runners import bench_common as common
except ImportError:  # copied beside benchprog.py on a device: benchprog loaded it under this name
    import bench_common as common  # type: ignore[no-redef]

BenchError = common.BenchError
_first_line = common.first_line


def sample_key(sample: int, position: int) -> str:
    return f"s{sample:06d}_{position}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "processor\t: a")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _first_text(*paths: str) -> str | None:
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = fh.read(200).replace(b"\0", b"").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text:
            return text
    return None


def _android_prop(name: str) -> str | None:
    import os
    import subprocess

    if not os.path.exists("/system/build.prop"):
        return None
    try:
        done = subprocess.run(["getprop", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def device_info() -> dict[str, Any]:
    """Who measured: the board or phone model and serial where the system exposes them (device tree,
    Android properties), the CPU, and the interpreter that ran this program."""
    import os

    import numpy

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.system(),
        "release": platform.release(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "numpy": numpy.__version__,
    }
    model = _first_text("/proc/device-tree/model", "/sys/firmware/devicetree/base/model") or _android_prop(
        "ro.product.model"
    )
    serial = _first_text("/proc/device-tree/serial-number") or _android_prop("ro.serialno")
    if model:
        info["model"] = model
    if serial:
        info["serial"] = serial
    return info


def random_feed(inputs: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    feed = {}
    for spec in inputs:
        shape = spec["shape"]
        if not all(isinstance(d, int) and d > 0 for d in shape):
            raise BenchError(f"input {spec['name']} has dynamic shape {shape}: give samples or fix the shape")
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.floating):
            feed[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        else:
            feed[spec["name"]] = rng.integers(0, 2 if dtype == np.bool_ else 100, shape).astype(dtype)
    return feed


class NpzSamples:
    """The samples file, read one sample at a time (np.load reads an npz member on access), so a large
    evaluation set is never in memory all at once."""

    def __init__(self, path: Path, names: list[str]) -> None:
        import numpy as np

        self.path, self.names = path, names
        try:
            self._archive = np.load(path, allow_pickle=False)
            keys = set(self._archive.files)
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read samples {path.name}: {_first_line(exc)}") from exc
        self.count = 0
        while sample_key(self.count, 0) in keys:
            self.count += 1
        if not self.count:
            raise BenchError(f"samples file {path.name} holds no samples")

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        try:
            return {name: self._archive[sample_key(index, j)] for j, name in enumerate(self.names)}
        except (OSError, ValueError, KeyError) as exc:
            raise BenchError(f"cannot read sample {index} of {self.path.name}: {_first_line(exc)}") from exc

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(self.count))

    def close(self) -> None:
        self._archive.close()


def write_samples(path: Path, samples: Iterable[Sequence[Any]]) -> int:
    """Writes sample i's arrays as members "s{i:06d}_{k}" of a plain npz (np.load reads it), one sample
    at a time as np.savez builds it, so no caller holds every array; returns the sample count."""
    import zipfile

    import numpy as np

    count = 0
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for i, arrays in enumerate(samples):
            for k, value in enumerate(arrays):
                with archive.open(f"{sample_key(i, k)}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, np.asarray(value), allow_pickle=False)
            count += 1
    return count
