"""ONNX Runtime for benchprog: the session, and its profile with the profiler's own cost measured.

ORT's per-node "kernel_time" event is not the kernel alone: its clock starts before ORT formats every
input's type and shape into a string and stops after it has done the same for the outputs and built the
event's arguments, a few microseconds per node whatever the kernel does. On a model of many small nodes
(PP-OCR's classifier: 209 nodes of ~5 us) that doubles the layers' sum. So the profile runs a probe
beside the model: a graph of no-op nodes (Identity and a 4-input Sum on one element) profiled on the
same options, one probe run after each profiled run so both see the same machine. Its events are that
per-node cost, as base + per_tensor x (inputs + outputs); the host subtracts it from each layer.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

try:
    from backends.runners import bench_common as common
except ImportError:  # copied beside benchprog.py on a device: benchprog loaded it under this name
    import bench_common as common  # type: ignore[no-redef]

BenchError = common.BenchError

ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(uint8)": "uint8",
    "tensor(int8)": "int8",
    "tensor(uint16)": "uint16",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}
"""onnxruntime's input type strings -> numpy dtype names (shared with the host side)."""

ORT_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
"""Spec/option level names -> onnxruntime.GraphOptimizationLevel members (shared with the host side)."""


class OrtSession:
    """ONNX Runtime behind the small interface benchprog needs; another runtime (OpenVINO) adds a
    class with the same methods and an entry in benchprog.RUNTIMES."""

    name = "onnxruntime"

    @staticmethod
    def preload() -> None:
        """Imports the runtime before the memory baseline, so the library is not billed to the model."""
        import onnxruntime  # noqa: F401

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        import onnxruntime as ort

        self._ort = ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = int(options.get("intra_op_num_threads", 0))
        so.inter_op_num_threads = int(options.get("inter_op_num_threads", 0))
        level = options.get("graph_optimization_level", "all")
        if level not in ORT_LEVELS:
            raise BenchError(f"unknown graph_optimization_level {level!r}")
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[level])
        mode = options.get("execution_mode", "sequential")
        so.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if mode == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        so.enable_mem_pattern = bool(options.get("enable_mem_pattern", True))
        so.enable_cpu_mem_arena = bool(options.get("enable_cpu_mem_arena", True))
        if options.get("profile_prefix"):
            so.enable_profiling = True
            so.profile_file_prefix = str(options["profile_prefix"])
        providers = list(options.get("providers", ["CPUExecutionProvider"]))
        disabled = list(options.get("disabled_optimizers", []))
        try:
            self._sess = ort.InferenceSession(
                str(model), so, providers=providers, disabled_optimizers=disabled
            )
        except Exception as exc:  # ORT raises its own exception types
            raise BenchError(f"onnxruntime cannot load {model.name}: {common.first_line(exc)}") from exc
        self.threads = so.intra_op_num_threads
        self.output_names = [o.name for o in self._sess.get_outputs()]

    @property
    def version(self) -> str:
        return str(self._ort.__version__)

    @property
    def providers(self) -> list[str]:
        return list(self._sess.get_providers())

    def inputs(self) -> list[dict[str, Any]]:
        out = []
        for i in self._sess.get_inputs():
            out.append({"name": i.name, "shape": list(i.shape), "dtype": ORT_DTYPES.get(i.type, i.type)})
        return out

    def infer(self, feed: dict[str, Any]) -> list[Any]:
        return list(self._sess.run(None, feed))

    def trace(self) -> list[dict[str, Any]]:
        """Ends profiling and returns ORT's chrome-trace events (the file is removed)."""
        path = Path(self._sess.end_profiling())
        try:
            events = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BenchError(
                f"cannot read onnxruntime's profile {path.name}: {common.first_line(exc)}"
            ) from exc
        finally:
            path.unlink(missing_ok=True)
        return events if isinstance(events, list) else []

    @classmethod
    def profile(
        cls,
        model: Path,
        options: dict[str, Any],
        feed: dict[str, Any],
        runs: int,
        folder: Path,
        probe: Path | None = None,
        probe_baseline: Path | None = None,
    ) -> dict[str, Any]:
        """`runs` iterations on a second session with ORT's profiler on (after the timed runs, so the
        profiler cannot disturb them, and back to back like them, so caches are as warm; repeated
        like them while the machine looks busy, the steadiest round kept): per node its
        kernel time and the provider that ran it, per run the kernels' sum, ORT's own whole-run time
        and the wall time around `run`. After each profiled run, untimed, one run of the `probe` graph
        profiled on the same options, so its cost per node is measured on the same machine as the
        model's runs (measured in a round of its own, beside a loaded suite the layers' sum read 1.18x
        the runs' CPU time); then, with `probe_baseline`, both timed without the profiler
        (probe_cost, run_costs)."""
        session = cls(model, {**options, "profile_prefix": str(folder / "ort-profile")})
        probe_options = {**options, "graph_optimization_level": "disable_all"}
        prober: OrtSession | None = None
        between = None
        if probe:  # one probe run after each profiled run: the profiler's cost on the same machine
            prober = cls(probe, {**probe_options, "profile_prefix": str(folder / "ort-probe")})
            between = _repeater(prober)
        steady = common.harness().time_steady(session.infer, feed, common.PROFILE_WARMUP, runs, between)
        later = (len(steady.rounds) - 1 - steady.kept) * runs  # profiled runs after the kept round
        cpu_ns = steady.timing.cpu_ns if session.threads == 1 else None
        out = ort_trace_summary(session.trace(), steady.timing.samples_ns, later, cpu_ns)
        out["noise"] = steady.as_dict()
        if prober is not None and probe:
            out["calibration"] = probe_cost(prober.trace(), runs, later)
            if probe_baseline:
                out["calibration"].update(
                    run_costs(cls(probe, probe_options), cls(probe_baseline, probe_options))
                )
        return out

    def zeros(self) -> dict[str, Any]:
        import numpy as np

        return {i["name"]: np.zeros(i["shape"], dtype=i["dtype"]) for i in self.inputs()}

    def node_count(self) -> int:
        """Nodes in the probe's graph (disable_all: what was written is what runs)."""
        return int(self._sess.get_modelmeta().custom_metadata_map.get("nodes", 0))


def _repeater(prober: OrtSession) -> Any:
    """A warmed-up probe's one run, as a call for the harness to make between timed runs."""
    zeros = prober.zeros()
    for _ in range(common.PROFILE_WARMUP):
        prober.infer(zeros)
    return lambda: prober.infer(zeros)


PROBE_TIMED_RUNS = 200
"""Unprofiled runs of each probe: ~40 us each, so a few milliseconds in all."""


def run_costs(probe: OrtSession, baseline: OrtSession) -> dict[str, Any]:
    """A run's fixed cost (the binding, feeds and fetches, the executor's set-up) and the dispatch per
    node, from the unprofiled p50 of the probe and of its baseline (same inputs and outputs, one node
    per chain): dispatch = difference / extra nodes, fixed = baseline less its nodes' dispatch."""
    nodes, base_nodes = probe.node_count(), baseline.node_count()
    if nodes <= base_nodes:
        raise BenchError("the profiler probe is not larger than its baseline")
    harness = common.harness()
    p50 = {}
    for name, session in (("probe", probe), ("baseline", baseline)):
        timing = harness.time_runs(session.infer, session.zeros(), 20, PROBE_TIMED_RUNS)
        p50[name] = common.median([ns / 1e3 for ns in timing.samples_ns])
    dispatch = max(0.0, (p50["probe"] - p50["baseline"]) / (nodes - base_nodes))
    return {
        "dispatch_per_node_us": round(dispatch, 4),
        "run_fixed_us": round(max(0.0, p50["baseline"] - dispatch * base_nodes), 4),
        "probe_p50_us": {k: round(v, 3) for k, v in p50.items()},
        "probe_nodes": {"probe": nodes, "baseline": base_nodes},
    }


def _windows(events: list[dict[str, Any]], runs: int, later: int = 0) -> list[tuple[int, int]]:
    """The `runs` model_run windows before the last `later` ones (the kept round of profiled runs; the
    warm-up runs come first, a noisier round before or after it)."""
    windows = sorted(
        (int(e["ts"]), int(e["ts"]) + int(e["dur"]))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    end = len(windows) - later
    return windows[max(0, end - runs) : end]


def _kernel_events(events: list[dict[str, Any]], windows: list[tuple[int, int]]) -> list[tuple[int, dict]]:
    """(run index, event) of every node's kernel event inside a profiled run."""
    starts = [a for a, _ in windows]  # sorted, disjoint: the window an event falls in by bisection
    out = []
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        ts = int(e["ts"])
        run = bisect.bisect_right(starts, ts) - 1
        if run >= 0 and ts <= windows[run][1]:
            out.append((run, e))
    return out


def _formatted(args: dict[str, Any]) -> tuple[int, int]:
    """The tensors ORT formatted for this event (inputs + outputs) and their dimensions: what its
    per-node cost grows with."""
    shapes = [*(args.get("input_type_shape") or []), *(args.get("output_type_shape") or [])]
    dims = sum(len(dims) for shape in shapes if isinstance(shape, dict) for dims in shape.values())
    return len(shapes), dims


def ort_trace_summary(
    events: list[dict[str, Any]], wall_ns: list[int], later: int = 0, cpu_ns: list[int] | None = None
) -> dict[str, Any]:
    """ORT's chrome-trace events reduced to what a profile needs. Each node's kernel event is billed to
    the `model_run` window it falls in; only the len(wall_ns) runs before the `later` ones count. A
    node's time is the middle mean of its runs (see bench_common.middle_mean) over the runs the
    machine did not preempt when `cpu_ns` (one intra-op thread) says which (unpreempted_runs)."""
    windows = _windows(events, len(wall_ns), later)
    per_run: list[dict[str, float]] = [{} for _ in windows]
    nodes: dict[str, dict[str, Any]] = {}
    for run, e in _kernel_events(events, windows):
        node = str(e["name"])[: -len("_kernel_time")]
        if node not in nodes:
            args = e.get("args") or {}
            outputs = args.get("output_type_shape") or [{}]
            tensors, dims = _formatted(args)
            nodes[node] = {
                "op_type": args.get("op_name"),
                "provider": args.get("provider"),
                "output_type": next(iter(outputs[0]), None) if isinstance(outputs[0], dict) else None,
                "tensors": tensors,
                "dims": dims,
            }
        per_run[run][node] = per_run[run].get(node, 0.0) + float(e["dur"])
    walls = wall_ns[-len(windows) :] if windows else []
    cpus = cpu_ns[-len(windows) :] if cpu_ns and windows and len(cpu_ns) >= len(windows) else None
    chosen = unpreempted_runs(walls, cpus)
    layers = [
        {"name": node, **info, "time_us": common.middle_mean([per_run[i].get(node, 0.0) for i in chosen])}
        for node, info in nodes.items()
    ]
    runs: list[dict[str, float]] = [
        {"kernels_us": float(sum(run.values())), "runtime_us": float(b - a), "wall_us": wall / 1e3}
        for run, (a, b), wall in zip(per_run, windows, walls, strict=True)
    ]
    if cpus is not None:
        for record, cpu in zip(runs, cpus, strict=True):
            record["cpu_us"] = cpu / 1e3
    return {"layers": layers, "runs": runs, "layer_runs": len(chosen)}


PREEMPTED_SHARE = 0.02
"""A profiled run whose wall time exceeds its thread's CPU time by more than this share (plus
PREEMPTED_FLOOR_NS) was preempted: its kernel events hold time another process had the core."""
PREEMPTED_FLOOR_NS = 20_000


def unpreempted_runs(wall_ns: list[int], cpu_ns: list[int] | None) -> list[int]:
    """The runs whose kernels to average. Kernel events are wall times, so on a shared machine a
    preempted run bills the wait to whichever kernel it hit; the calling thread's CPU time (the whole
    work on one intra-op thread) says which runs were not preempted. All runs when CPU time is not
    known; the least-preempted quarter (at least 3) when too few ran clean."""
    every = list(range(len(wall_ns)))
    if cpu_ns is None or len(cpu_ns) != len(wall_ns):
        return every
    waited = [wall - cpu for wall, cpu in zip(wall_ns, cpu_ns, strict=True)]
    clean = [i for i in every if waited[i] <= cpu_ns[i] * PREEMPTED_SHARE + PREEMPTED_FLOOR_NS]
    least = max(3, len(every) // 4)
    if len(clean) >= least:
        return clean
    return sorted(every, key=lambda i: waited[i])[:least]


def probe_cost(events: list[dict[str, Any]], runs: int, later: int = 0) -> dict[str, Any]:
    """The profiler's per-node cost from the probe's events: the middle mean of the events of each
    (tensors, dims) kind, fitted exactly as base + per_tensor x tensors + per_dim x dims (the probe has
    three kinds; a coefficient the noise made negative is clamped to zero)."""
    import numpy as np

    by_kind: dict[tuple[int, int], list[float]] = {}
    for _, e in _kernel_events(events, _windows(events, runs, later)):
        by_kind.setdefault(_formatted(e.get("args") or {}), []).append(float(e["dur"]))
    kinds = sorted(by_kind)
    if len(kinds) < 3:
        raise BenchError(f"the profiler probe recorded {len(kinds)} kinds of node events, expected 3")
    means = [common.middle_mean(by_kind[k]) for k in kinds]
    design = np.array([[1.0, t, d] for t, d in kinds])
    base, per_tensor, per_dim = (max(0.0, float(c)) for c in np.linalg.lstsq(design, means, rcond=None)[0])
    return {
        "base_us": round(base, 4),
        "per_tensor_us": round(per_tensor, 4),
        "per_dim_us": round(per_dim, 4),
        "by_kind_us": {f"{t} tensors, {d} dims": round(m, 4) for (t, d), m in zip(kinds, means, strict=True)},
        "events": sum(len(v) for v in by_kind.values()),
        "runs": runs,
    }
