"""Throughput: frames per second, derived from the measured mean latency and the frames one inference
processes. It is never measured on its own nor written to a lock file, so it always agrees with the
latency it comes from: FPS = batch * 1000 / mean latency in ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler.records.measured import Measured

if TYPE_CHECKING:
    from reconciler.state.lockread import LockView

MEAN = "latency_ms.mean"
"""The measurement it is derived from: the mean of evaluate's timed runs."""


def batch(inputs: Mapping[str, list[int]], compile_batch: int = 1) -> int:
    """Frames one inference processes: the inputs' common leading dimension when it is above 1 (a
    shape variant of batch 4), else `compile.batch`."""
    leading = {int(shape[0]) for shape in inputs.values() if shape}
    if len(leading) == 1 and (only := leading.pop()) > 1:
        return only
    return max(1, int(compile_batch))


def fps(mean_ms: float | None, frames: int) -> float | None:
    """batch * 1000 / mean latency; None without a positive latency."""
    if mean_ms is None or mean_ms <= 0:
        return None
    return frames * 1000.0 / mean_ms


def of_measurements(measured: Mapping[str, Measured], frames: int) -> float | None:
    """The FPS of one variant's measurements; None when no mean was measured."""
    mean = measured.get(MEAN)
    return fps(float(mean.value), frames) if mean is not None and mean.value is not None else None


def variant_fps(
    measured: Mapping[str, Measured], inputs: Mapping[str, list[int]], compile_batch: int = 1
) -> float | None:
    """One variant's FPS from its measurements, its input shapes and `compile.batch`."""
    return of_measurements(measured, batch(inputs, compile_batch))


def from_lock(lock: LockView) -> dict[str, float]:
    """variant -> FPS of a lock file's measurements, with the batch its compile stage was built with."""
    out: dict[str, float] = {}
    for name, variant in lock.variants.items():
        compiled = variant.stages.get("compile")
        built = compiled.inputs if compiled is not None else {}
        built_batch = int(((built.get("fields") or {}).get("compile") or {}).get("batch") or 1)
        value = variant_fps(variant.measurements, variant.inputs, built_batch)
        if value is not None:
            out[name] = value
    return out
