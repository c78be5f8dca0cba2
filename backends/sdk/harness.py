"""The one timing harness every runner shares (the Polygraphy pattern: the harness owns timing and
memory, a runtime only supplies `infer(feed)`), so host and device numbers are taken the same way.

Standard library and numpy only: the ssh/adb runners copy this file next to benchprog.py onto a
device. Peak memory is the process high-water mark (`ru_maxrss`); on Linux the mark is reset just
before the session is created (/proc/self/clear_refs), so its increase is what the model cost, not
whatever the interpreter touched while starting.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

Feed = TypeVar("Feed")

PERCENTILES = (50, 90, 95, 99)

NOISE_RATIO = 2.0
"""A round whose p90 is more than this many times its p50 is suspected of noise (another process took
the core: on a shared 2-core machine one round showed p90 21.35 ms at p50 1.1 ms)."""
NOISE_FLOOR_MS = 0.1
"""...and its tail is longer than this: the tail of a 20 us model is timer and scheduler jitter, which no
latency budget in milliseconds can see."""
MAX_ROUNDS = 3
"""Rounds timed at most when noise is suspected; the steadiest (lowest p90) is kept, and the record says so."""


@dataclass(frozen=True)
class Timing:
    """Timed runs in nanoseconds (after `warmup` untimed runs)."""

    samples_ns: list[int]
    warmup: int
    cpu_ns: list[int] = field(default_factory=list)
    """Each run's CPU time on the calling thread: the whole run's work when the runtime computes on
    that thread alone (one intra-op thread), which another process taking the core cannot inflate."""

    def samples_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self.samples_ns]

    def summary_ms(self) -> dict[str, float]:
        """p50/p90/p95/p99 (numpy, linear interpolation), mean, min, max and stdev, in ms."""
        import numpy as np

        ms = np.asarray(self.samples_ms(), dtype=np.float64)
        values = np.percentile(ms, PERCENTILES, method="linear")
        out = {f"p{p}": float(v) for p, v in zip(PERCENTILES, values, strict=True)}
        out["mean"] = float(ms.mean())
        out["min"] = float(ms.min())
        out["max"] = float(ms.max())
        out["stdev"] = float(statistics.pstdev(ms.tolist())) if len(ms) > 1 else 0.0
        return out


def time_runs(
    infer: Callable[[Feed], Any],
    feed: Feed,
    warmup: int,
    runs: int,
    between: Callable[[], Any] | None = None,
) -> Timing:
    """`warmup` untimed calls, then `runs` calls each timed with perf_counter_ns. The garbage collector
    is paused while timing so a collection is not billed to one unlucky run. `between` runs after each
    timed call, untimed: work that must see the same machine as each run (a profiler's probe)."""
    if runs <= 0:
        raise ValueError("runs must be > 0")
    for _ in range(max(0, warmup)):
        infer(feed)
    samples: list[int] = []
    cpu: list[int] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            start, thread = time.perf_counter_ns(), time.thread_time_ns()
            infer(feed)
            samples.append(time.perf_counter_ns() - start)
            cpu.append(time.thread_time_ns() - thread)
            if between is not None:
                between()
    finally:
        if enabled:
            gc.enable()
    return Timing(samples, max(0, warmup), cpu)


def time_pair(
    first: Callable[[Feed], Any], second: Callable[[Feed], Any], feed: Feed, warmup: int, runs: int
) -> tuple[Timing, Timing]:
    """Two models timed in alternation on one feed: `warmup` untimed calls of each, then `runs` timed
    calls of each, which one goes first swapping every pair. Both see the same process and machine
    (the caches, the clock, whatever else runs), so their ratio carries no order bias: timed one after
    the other, the model timed second ran 15-20 % faster than when timed first (a 1 ms detector)."""
    if runs <= 0:
        raise ValueError("runs must be > 0")
    for _ in range(max(0, warmup)):
        first(feed)
        second(feed)
    took: tuple[list[int], list[int]] = ([], [])
    cpu: tuple[list[int], list[int]] = ([], [])
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(runs):
            for k in (0, 1) if i % 2 == 0 else (1, 0):
                start, thread = time.perf_counter_ns(), time.thread_time_ns()
                (first, second)[k](feed)
                took[k].append(time.perf_counter_ns() - start)
                cpu[k].append(time.thread_time_ns() - thread)
    finally:
        if enabled:
            gc.enable()
    return Timing(took[0], max(0, warmup), cpu[0]), Timing(took[1], max(0, warmup), cpu[1])


def _noisy(timing: Timing) -> bool:
    summary = timing.summary_ms()
    tail = summary["p90"] - summary["p50"]
    return summary["p50"] > 0 and summary["p90"] / summary["p50"] > NOISE_RATIO and tail > NOISE_FLOOR_MS


@dataclass(frozen=True)
class Steady:
    """The kept round and what was seen on the way: every round's p50/p90, and why rounds were added."""

    timing: Timing
    rounds: list[dict[str, float]]
    kept: int

    def as_dict(self) -> dict[str, Any]:
        first = self.rounds[0]
        out: dict[str, Any] = {
            "p90_over_p50": round(first["p90"] / first["p50"], 3) if first["p50"] > 0 else None,
            "rounds": self.rounds,
            "kept_round": self.kept,
            "suspected": len(self.rounds) > 1,
        }
        if len(self.rounds) > 1:
            out["why"] = (
                f"round 1 had p90/p50 = {out['p90_over_p50']} > {NOISE_RATIO}: timed {len(self.rounds)} rounds, "
                f"kept round {self.kept + 1} (the lowest p90)"
            )
        return out


def time_steady(
    infer: Callable[[Feed], Any],
    feed: Feed,
    warmup: int,
    runs: int,
    between: Callable[[], Any] | None = None,
) -> Steady:
    """`time_runs`, repeated (up to MAX_ROUNDS, no further warm-up) while a round's tail says the machine
    was busy; a model whose latency is simply spread out repeats and keeps its spread."""
    rounds = [time_runs(infer, feed, warmup, runs, between)]
    while runs >= 10 and len(rounds) < MAX_ROUNDS and _noisy(rounds[-1]):
        rounds.append(time_runs(infer, feed, 0, runs, between))
    summaries = [r.summary_ms() for r in rounds]
    kept = min(range(len(rounds)), key=lambda i: summaries[i]["p90"])
    kept_timing = Timing(rounds[kept].samples_ns, rounds[0].warmup, rounds[kept].cpu_ns)
    seen = [{"p50": round(s["p50"], 6), "p90": round(s["p90"], 6)} for s in summaries]
    return Steady(kept_timing, seen, kept)


def peak_rss_bytes() -> int:
    """The process's peak resident set size (getrusage RUSAGE_SELF ru_maxrss), in bytes; 0 where the
    platform has no getrusage."""
    try:
        import resource
    except ImportError:
        return 0
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # macOS reports bytes, Linux KiB


def current_rss_bytes() -> int | None:
    """Resident set size now (Linux /proc), or None where unknown."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Resets the kernel's high-water mark to the current RSS (Linux >= 4.0); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Memory:
    peak_rss_bytes: int
    """Process peak RSS at the end of the benchmark."""
    baseline_rss_bytes: int
    """RSS right before the session was created."""
    peak_reset: bool
    """True when the peak was reset at the baseline, so `delta_bytes` is exactly the session's cost;
    False: the delta is a lower bound (an earlier transient peak may hide part of it)."""

    @property
    def delta_bytes(self) -> int:
        return max(0, self.peak_rss_bytes - self.baseline_rss_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak_rss_mb": self.peak_rss_bytes / 1e6,
            "baseline_rss_mb": self.baseline_rss_bytes / 1e6,
            "delta_mb": self.delta_bytes / 1e6,
            "peak_reset": self.peak_reset,
        }


class MemoryProbe:
    """Takes the baseline when constructed; `measure()` reads the peak since then."""

    def __init__(self) -> None:
        gc.collect()
        self.reset = _reset_peak()
        current = current_rss_bytes() if self.reset else None
        self.baseline = current if current is not None else peak_rss_bytes()

    def measure(self) -> Memory:
        return Memory(peak_rss_bytes(), self.baseline, self.reset)


@dataclass(frozen=True)
class BenchResult:
    timing: Timing
    memory: Memory
    load_ms: float
    """Time to create the session (load + optimize + allocate)."""
    noise: dict[str, Any] | None = None
    """Steady.as_dict(): the tail ratio, and the rounds timed when noise was suspected."""

    def as_dict(self, with_samples: bool = True) -> dict[str, Any]:
        latency = latency_ms(self.timing, self.noise, with_samples)
        return {"latency_ms": latency, "memory": self.memory.as_dict(), "load_ms": self.load_ms}


def latency_ms(timing: Timing, noise: dict[str, Any] | None, with_samples: bool = True) -> dict[str, Any]:
    """A response's "latency_ms": the summary, runs, warm-up, the thread's CPU p50, the noise seen."""
    latency: dict[str, Any] = dict(timing.summary_ms())
    latency["runs"] = len(timing.samples_ns)
    latency["warmup"] = timing.warmup
    if timing.cpu_ns:
        latency["cpu_p50"] = statistics.median(ns / 1e6 for ns in timing.cpu_ns)
    if noise is not None:
        latency["noise"] = noise
    if with_samples:
        latency["samples"] = [round(ms, 6) for ms in timing.samples_ms()]
    return latency


def benchmark(
    create: Callable[[], Callable[[Feed], Any]], make_feed: Callable[[], Feed], warmup: int, runs: int
) -> BenchResult:
    """Creates the session through `create()` (which returns `infer`), builds the timed feed with
    `make_feed()` (after creation, so it may read the session's inputs), times `infer` on it, and
    measures memory from a baseline taken before creation."""
    probe = MemoryProbe()
    start = time.perf_counter_ns()
    infer = create()
    load_ms = (time.perf_counter_ns() - start) / 1e6
    steady = time_steady(infer, make_feed(), warmup, runs)
    return BenchResult(steady.timing, probe.measure(), load_ms, steady.as_dict())
