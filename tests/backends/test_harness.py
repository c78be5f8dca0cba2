"""The shared timing harness: warm-up and timed calls, percentiles, and peak memory."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from backends.sdk import harness


def test_warmup_then_timed_runs() -> None:
    calls: list[int] = []
    timing = harness.time_runs(lambda feed: calls.append(feed), 7, warmup=3, runs=11)
    assert calls == [7] * 14
    assert len(timing.samples_ns) == 11 and timing.warmup == 3
    assert all(ns > 0 for ns in timing.samples_ns)


def test_between_runs_after_each_timed_run_and_is_not_timed() -> None:
    import time

    events: list[str] = []
    timing = harness.time_runs(
        lambda feed: events.append("run"),
        None,
        warmup=2,
        runs=3,
        between=lambda: (events.append("probe"), time.sleep(0.1)),
    )
    assert events == ["run", "run"] + ["run", "probe"] * 3
    assert max(timing.samples_ns) < 100_000_000  # the 100 ms sleep of `between` is in no run's time


def test_summary_uses_numpy_linear_percentiles() -> None:
    timing = harness.Timing([1_000_000 * v for v in (5, 1, 4, 2, 3, 10, 7, 6, 9, 8)], warmup=0)
    summary = timing.summary_ms()
    ms = np.arange(1, 11, dtype=float)
    for p in (50, 90, 95, 99):
        assert summary[f"p{p}"] == pytest.approx(float(np.percentile(ms, p, method="linear")))
    assert summary["p50"] == pytest.approx(5.5)
    assert summary["mean"] == pytest.approx(5.5)
    assert (summary["min"], summary["max"]) == (1.0, 10.0)
    assert summary["p50"] <= summary["p90"] <= summary["p95"] <= summary["p99"] <= summary["max"]


def test_runs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="runs"):
        harness.time_runs(lambda feed: None, None, warmup=0, runs=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak reset needs /proc")
def test_memory_probe_sees_an_allocation_after_the_baseline() -> None:
    # An anonymous mapping of its own, every page written: the allocator cannot serve it from memory
    # the worker already holds resident (glibc keeps freed heap resident when a library in the same
    # process raised its mmap or trim threshold, so a plain array may add nothing to RSS).
    size = 64 * 1024 * 1024
    probe = harness.MemoryProbe()
    block = mmap.mmap(-1, size)
    block.write(b"\x01" * size)
    memory = probe.measure()
    block.close()
    assert memory.peak_reset
    assert memory.delta_bytes >= 48 * 1024 * 1024
    assert memory.peak_rss_bytes >= memory.baseline_rss_bytes > 0
    assert memory.as_dict()["delta_mb"] == pytest.approx(memory.delta_bytes / 1e6)


def test_benchmark_creates_then_builds_the_feed_then_times() -> None:
    order: list[str] = []

    def create():  # type: ignore[no-untyped-def]
        order.append("create")
        return lambda feed: order.append(f"infer {feed}")

    def make_feed() -> str:
        order.append("feed")
        return "f"

    result = harness.benchmark(create, make_feed, warmup=1, runs=2)
    assert order == ["create", "feed", "infer f", "infer f", "infer f"]
    assert result.load_ms >= 0
    data = result.as_dict()
    assert data["latency_ms"]["runs"] == 2 and len(data["latency_ms"]["samples"]) == 2
    assert "samples" not in result.as_dict(with_samples=False)["latency_ms"]
    assert data["memory"]["peak_rss_mb"] > 0


class ScriptedClock:
    """Stands in for perf_counter_ns: each call of the scripted `infer` advances it by the next duration,
    so a test states exactly what a busy or a quiet machine looked like."""

    def __init__(self, durations_ms: list[float]) -> None:
        self.now = 0
        self.durations = iter(durations_ms)

    def perf_counter_ns(self) -> int:
        return self.now

    def infer(self, _feed: object) -> None:
        self.now += int(next(self.durations) * 1e6)


def _timed(monkeypatch: pytest.MonkeyPatch, durations: list[float], runs: int = 20) -> harness.Steady:
    clock = ScriptedClock(durations)
    monkeypatch.setattr(harness.time, "perf_counter_ns", clock.perf_counter_ns)
    return harness.time_steady(clock.infer, None, 0, runs)


def test_a_quiet_machine_is_timed_once_and_its_spread_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    steady = _timed(monkeypatch, [1.0] * 15 + [1.2] * 5)
    assert len(steady.rounds) == 1 and steady.kept == 0
    record = steady.as_dict()
    expected_p90 = float(np.percentile([1.0] * 15 + [1.2] * 5, 90))
    assert record["suspected"] is False and record["p90_over_p50"] == round(expected_p90 / 1.0, 3)


def test_a_busy_round_is_repeated_and_the_steadiest_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = [1.0] * 16 + [20.0] * 4  # another process took the core for the last runs
    quiet = [1.0] * 19 + [1.1]
    steady = _timed(monkeypatch, busy + quiet)
    assert len(steady.rounds) == 2 and steady.kept == 1
    assert max(steady.timing.samples_ms()) == pytest.approx(1.1)
    record = steady.as_dict()
    assert record["suspected"] is True and "timed 2 rounds, kept round 2" in record["why"]
    assert record["rounds"][0]["p90"] == pytest.approx(float(np.percentile(busy, 90)))


def test_the_jitter_of_a_microsecond_model_is_not_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = [0.02] * 15 + [0.05] * 5  # p90/p50 = 2.5, but a tail of 30 us
    assert len(_timed(monkeypatch, tiny).rounds) == 1


def test_a_model_that_is_simply_spread_keeps_its_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three rounds at most: a tail that never goes away is the model's, and stays in the record."""
    spread = [1.0] * 17 + [5.0] * 3
    steady = _timed(monkeypatch, spread * 3)
    assert len(steady.rounds) == harness.MAX_ROUNDS
    assert steady.timing.summary_ms()["p90"] == pytest.approx(float(np.percentile(spread, 90)))


def test_two_models_are_timed_in_alternation_each_first_in_turn() -> None:
    """time_pair warms both, then times `runs` calls of each, swapping which goes first every pair, so
    neither is always the one that runs after the other."""
    calls: list[str] = []
    first, second = (lambda feed: calls.append("a")), (lambda feed: calls.append("b"))
    a, b = harness.time_pair(first, second, None, warmup=2, runs=4)
    assert calls == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert len(a.samples_ns) == len(b.samples_ns) == 4 and a.warmup == b.warmup == 2
    assert len(a.cpu_ns) == len(b.cpu_ns) == 4
