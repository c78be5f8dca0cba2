"""What benchprog's modules share: the error it reports, the loader that finds a sibling module, and
the robust statistics its profilers use.

Standard library only, like every bench file: the ssh and adb runners copy the bench files into one
folder on a device (backends.runners.bench_files), where they find each other by file name.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import sys
from pathlib import Path
from types import ModuleType

PROFILE_WARMUP = 2
"""Untimed runs of a profiling session before its profiled runs (the first run allocates)."""


class BenchError(Exception):
    """A failure benchprog can explain; `kind` is "terminal" (bad request or model) or "transient"."""

    def __init__(self, message: str, kind: str = "terminal") -> None:
        super().__init__(message)
        self.kind = kind


_LOCATION = re.compile(r"Exception from \S+:\d+:\s*")
"""OpenVINO's C++ source locations, which head its messages and say where, not what."""


def first_line(exc: BaseException) -> str:
    """The line of a runtime's message that says what went wrong (bounded): OpenVINO's leading source
    locations dropped ("Exception from src/...cpp:224:" then the reason on a later line). The same rule
    as backends.sdk.errors.summary, kept here because bench files run on devices with the stdlib only."""
    lines = [_LOCATION.sub("", line).strip() for line in str(exc).strip().splitlines()]
    said = [line for line in lines if line]
    if not said:
        return type(exc).__name__
    line = f"{said[0]} {said[1]}" if said[0].endswith(":") and len(said) > 1 else said[0]
    return line[:300]


def load(package: str, name: str) -> ModuleType:
    """`package.name` from the installed npuctl or, run by path without it or copied to a device, the
    file `name.py` beside this one (or in ../sdk, where the harness lives), loaded under `name` without
    putting its folder on sys.path."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError:
        if name in sys.modules and sys.modules[name] is not None:
            return sys.modules[name]
        here = Path(__file__).resolve().parent
        for candidate in (here / f"{name}.py", here.parent / "sdk" / f"{name}.py"):
            if candidate.is_file():
                return _load_file(name, candidate)
        raise


def _load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def harness() -> ModuleType:
    """The one timing harness (backends.sdk.harness)."""
    return load("backends.sdk", "harness")


def runs_within(budget_ms: float, run_ms: float, least: int, most: int) -> int:
    """How many runs of `run_ms` fit `budget_ms`, within least..most. A run's noise (the timer, the
    scheduler) is tens of microseconds whatever the model, so it is small against a slow model's run:
    a few runs measure a 100 ms model as well as many measure a 1 ms one, whose layers take
    microseconds."""
    if run_ms <= 0:
        return most
    return max(least, min(most, math.ceil(budget_ms / run_ms)))


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def middle_mean(values: list[float]) -> float:
    """The mean of the middle half (the interquartile mean): robust to a preempted run like a median,
    but unlike a median of ORT's whole-microsecond durations it keeps their fractional average."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    cut = len(ordered) // 4
    kept = ordered[cut : len(ordered) - cut] or ordered
    return sum(kept) / len(kept)
