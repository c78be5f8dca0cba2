"""A profile's layer times come from the runs the machine did not preempt: on a shared machine a
preempted run bills the wait to whichever kernel it hit (the layers' sum of test_profile_sums ran
1.24x the CPU time under a loaded full suite). The trace here is built by hand in ORT's format."""

from __future__ import annotations

from typing import Any

from backends.runners import bench_ort


def _trace(kernel_us: list[list[float]]) -> list[dict[str, Any]]:
    """model_run windows back to back, each with its nodes' kernel events in order."""
    events: list[dict[str, Any]] = []
    ts = 1000
    for run in kernel_us:
        start = ts
        for k, dur in enumerate(run):
            events.append({"cat": "Node", "name": f"n{k}_kernel_time", "ts": ts, "dur": dur, "args": {}})
            ts += int(dur) + 1
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": ts - start})
        ts += 10
    return events


def test_preempted_runs_do_not_inflate_the_layers() -> None:
    clean = [100.0, 200.0]
    runs, walls, cpus = [], [], []
    for i in range(20):
        preempted = i % 2 == 1  # half the runs lost 3 ms of the core inside n1
        runs.append([100.0, 200.0 + (3000.0 if preempted else 0.0)])
        cpus.append(300_000)
        walls.append(300_000 + (3_000_000 if preempted else 1_000))
    out = bench_ort.ort_trace_summary(_trace(runs), walls, 0, cpus)
    times = {layer["name"]: layer["time_us"] for layer in out["layers"]}
    assert times == {"n0": clean[0], "n1": clean[1]}
    assert out["layer_runs"] == 10
    assert [r["cpu_us"] for r in out["runs"]] == [300.0] * 20
    # without the CPU times the middle mean alone keeps half the preempted runs' wait
    blind = bench_ort.ort_trace_summary(_trace(runs), walls, 0, None)
    assert {layer["name"]: layer["time_us"] for layer in blind["layers"]}["n1"] > 1000


def test_when_every_run_was_preempted_the_least_preempted_quarter_counts() -> None:
    walls = [1_000_000 + 10_000 * i for i in range(12)]
    cpus = [500_000] * 12
    chosen = bench_ort.unpreempted_runs(walls, cpus)
    assert chosen == [0, 1, 2]
    assert bench_ort.unpreempted_runs(walls, None) == list(range(12))
