"""The benchmark program every runner executes: `python -m backends.runners.benchprog REQUEST.json`.

Standalone by design: it imports only the standard library, numpy, the runtime named in the request
and the shared harness (`backends.sdk.harness`, or `harness.py` copied beside this file), because the ssh
and adb runners copy these two files to a device and run them there. It prints exactly one JSON
object on stdout and exits 0; on a failure it can explain, it prints {"ok": false, ...} and exits 2.
Anything else (a crash, a kill) is the runner's to interpret.

Request (paths relative to the request file's folder):
    {"format_version": 1, "runtime": "onnxruntime", "model": "model.ort",
     "options": {"intra_op_num_threads": 2, "inter_op_num_threads": 1, "execution_mode": "sequential",
                 "graph_optimization_level": "disable_all", "enable_mem_pattern": true,
                 "enable_cpu_mem_arena": true, "disabled_optimizers": [],
                 "providers": ["CPUExecutionProvider"]},
     "warmup": 10, "runs": 100, "seed": 0,
     "samples": "samples.npz" | null, "sample_inputs": ["x"], "outputs": "outputs.npz" | null,
     "profile": {"runs": 20, "probe": "probe.onnx", "probe_baseline": "probe1.onnx" (both optional),
                 "budget_ms": 300, "least": 10 (both optional)} | absent,
     "baseline": {"model": "float.onnx", "options": {...}, "budget_ms": 2000, "least": 10 (both
                  optional)} | absent}
`samples.npz` holds key "s{i:06d}_{j}" = sample i's array for sample_inputs[j]. Timing uses sample 0,
or a random feed from `seed` when there are no samples. With `outputs`, every sample is run once more
after timing and its outputs are written as "s{i:06d}_{k}" for the k-th output name. With `baseline`,
a second model (the float source of an int8 build) is then timed on the same feed and warm-up, on its
own session with `options` over the request's, in alternation with the main model on a second session
of it (its paired timing): one process and one runtime import for both, and no bias of order.
With `budget_ms` and `least`, the profile's and the baseline's runs are as many as fit that budget at
the timed p50, within least..runs (bench_common.runs_within): a slow model is profiled and its
baseline timed in fewer runs, a fast one in all of them.

Response (one JSON line on stdout):
    {"format_version": 1, "ok": true, "runtime": "onnxruntime", "runtime_version": "1.32.0",
     "providers": ["CPUExecutionProvider"], "threads": 2,
     "device": {"cpu", "cpus", "machine", "system", "release", "python", "numpy"},
     "inputs": [{"name", "shape", "dtype"}], "timed_feed": "sample 0" | "random, seed 0",
     "latency_ms": {"p50", "p90", "p95", "p99", "mean", "min", "max", "stdev", "runs", "warmup",
                    "cpu_p50" (the calling thread's CPU time), "samples": [ms, ...]},
     "memory": {"peak_rss_mb", "baseline_rss_mb", "delta_mb", "peak_reset"}, "load_ms": 12.3,
     "outputs": {"file": "outputs.npz", "names": [...], "samples": 3} | null,
     "baseline": {"latency_ms": {as above, without samples}, "paired_ms": {the main model's, timed in
                  alternation with it}, "load_ms": 20.1} (only when requested),
     "profile": {"available": true, "how", "layers": [{"name", "op_type", "provider", "time_us"}],
                 "runs": [{"kernels_us", "runtime_us", "wall_us"}],
                 "calibration": {"base_us", "per_tensor_us", "per_dim_us", "run_fixed_us",
                                 "dispatch_per_node_us", ...} (with probes)} (only when requested)}
The profile runs last, as separate iterations on a second session: it never touches the timed runs.
The runtimes live in bench_ort.py and bench_runtimes.py, the samples and device facts in bench_io.py,
what they share in bench_common.py: the remote runners copy them all (backends.runners.bench_files).
Failure: {"format_version": 1, "ok": false, "error": "one line", "kind": "terminal" | "transient"}, exit 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

FORMAT_VERSION = 1
EXIT_FAILED = 2


def _common() -> ModuleType:
    """bench_common from the installed npuctl, else the file beside this one (run by path, or copied
    to a device): the other bench modules then find it under the same name."""
    try:
        return importlib.import_module("backends.runners.bench_common")
    except ImportError:
        if isinstance(sys.modules.get("bench_common"), ModuleType):
            return sys.modules["bench_common"]
        path = Path(__file__).resolve().with_name("bench_common.py")
        spec = importlib.util.spec_from_file_location("bench_common", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_common"] = module
        spec.loader.exec_module(module)
        return module


common = _common()
bench_io = common.load("backends.runners", "bench_io")
bench_ort = common.load("backends.runners", "bench_ort")
bench_runtimes = common.load("backends.runners", "bench_runtimes")

BenchError = common.BenchError
ORT_DTYPES: dict[str, str] = bench_ort.ORT_DTYPES
ORT_LEVELS: dict[str, str] = bench_ort.ORT_LEVELS
sample_key = bench_io.sample_key
write_samples = bench_io.write_samples

RUNTIMES: dict[str, Any] = {
    "onnxruntime": bench_ort.OrtSession,
    "openvino": bench_runtimes.OvSession,
    "rknnlite": bench_runtimes.RknnLiteSession,
    "litert": bench_runtimes.LiteRtSession,
}


def _bounded(request: dict[str, Any], runs: int, timed_ms: float) -> int:
    """`runs`, or as many as fit the request's `budget_ms` at `timed_ms` a run (at least `least`)."""
    if "budget_ms" not in request:
        return runs
    least = min(runs, int(request.get("least", 1)))
    return int(common.runs_within(float(request["budget_ms"]), timed_ms, least, runs))


def run_profile(
    runtime: Any,
    model: Path,
    options: dict[str, Any],
    feed: Any,
    request: dict[str, Any],
    folder: Path,
    timed_ms: float = 0.0,
) -> dict[str, Any]:
    """The runtime's own per-layer profile, or why there is none; `timed_ms`: the timed p50."""
    if not hasattr(runtime, "profile"):
        return {"available": False, "reason": f"benchprog has no profiler for {runtime.name}"}
    most = int(request.get("runs", 20))
    runs = _bounded(request, most, timed_ms)
    extra = {
        key: _resolve(folder, request[key], f"profile.{key}")
        for key in ("probe", "probe_baseline")
        if request.get(key)
    }
    out = runtime.profile(model, options, feed, runs, folder, **extra)
    out["available"] = True
    out["how"] = (
        f"{runs} separate iterations on a second session with profiling on, after the timed runs "
        f"({common.PROFILE_WARMUP} warm-up): the timed latency was taken without the profiler; "
        "each layer's time is the mean of the middle half of its times over those runs"
    )
    if runs < most:
        out["how"] += (
            f" ({runs} of at most {most}: as many as fit {request['budget_ms']:g} ms at the timed p50 "
            f"of {timed_ms:.3f} ms)"
        )
    if out.get("layer_runs") is not None and out["layer_runs"] < runs:
        out["how"] += (
            f" (the {out['layer_runs']} runs the machine preempted least: wall time within "
            "2 % of the thread's CPU time, or the least-preempted quarter)"
        )
    if "calibration" in out:
        out["how"] += (
            "; then as many runs of a probe graph of no-op nodes, whose events measure the "
            "profiler's own cost per node; the probe and its one-node baseline timed "
            "without the profiler measure a run's fixed cost and the dispatch per node"
        )
    return out


def write_outputs(path: Path, session: Any, samples: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Each sample's outputs, written as soon as they are computed: the runtime's `outputs` where it
    scores on other kernels than it times on (LiteRT's reference), else what was timed."""
    run = getattr(session, "outputs", session.infer)
    count = write_samples(path, (run(feed) for feed in samples))
    return {"file": path.name, "names": session.output_names, "samples": count}


def time_baseline(
    runtime: Any,
    base: Path,
    request: dict[str, Any],
    feed: Any,
    warmup: int,
    runs: int,
    timed_ms: float,
    model: Path,
) -> dict[str, Any]:
    """The baseline model (the float source of an int8 build) and the main `model` again, timed in
    alternation on the same feed (harness.time_pair), after the main model's own timing: the
    comparison without the bias of which ran first. Its runs are within the request's budget at the
    main model's p50 `timed_ms`; the main model's recorded latency stays its own timing."""
    spec = request["baseline"]
    if not isinstance(spec, dict):
        raise BenchError("request field 'baseline' must be an object")
    runs = _bounded(spec, runs, timed_ms)
    other = _resolve(base, spec.get("model"), "baseline.model")
    main_options = dict(request.get("options", {}))
    options = {**main_options, **dict(spec.get("options") or {})}
    harness = common.harness()
    start = time.perf_counter_ns()
    session = runtime(other, options)
    load_ms = (time.perf_counter_ns() - start) / 1e6
    again = runtime(model, main_options)
    try:
        paired, timed = harness.time_pair(again.infer, session.infer, feed, warmup, runs)
    except Exception as exc:  # the runtime rejected the feed: deterministic, not worth a retry
        raise BenchError(f"inference of the baseline failed: {common.first_line(exc)}") from exc
    return {
        "latency_ms": harness.latency_ms(timed, None, False),
        "paired_ms": harness.latency_ms(paired, None, False),
        "load_ms": load_ms,
    }


def _resolve(base: Path, value: Any, what: str) -> Path:
    if not isinstance(value, str) or not value:
        raise BenchError(f"request field {what!r} must be a file name")
    path = Path(value)
    return path if path.is_absolute() else base / path


def run(request_path: Path) -> dict[str, Any]:
    try:
        request = json.loads(request_path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read request {request_path}: {common.first_line(exc)}") from exc
    if request.get("format_version") != FORMAT_VERSION:
        raise BenchError(
            f"request format_version {request.get('format_version')!r}, expected {FORMAT_VERSION}"
        )
    runtime = RUNTIMES.get(str(request.get("runtime")))
    if runtime is None:
        raise BenchError(
            f"runtime {request.get('runtime')!r} is not supported here (known: {', '.join(RUNTIMES)})"
        )
    base = request_path.resolve().parent
    model = _resolve(base, request.get("model"), "model")
    warmup, runs = int(request.get("warmup", 10)), int(request.get("runs", 100))
    samples: Any = None
    if request.get("samples"):
        samples = bench_io.NpzSamples(
            _resolve(base, request["samples"], "samples"), list(request.get("sample_inputs", []))
        )
    harness = common.harness()
    runtime.preload()
    holder: dict[str, Any] = {}

    def create() -> Any:
        holder["session"] = runtime(model, dict(request.get("options", {})))
        return holder["session"].infer

    seed = int(request.get("seed", 0))

    def make_feed() -> dict[str, Any]:
        return samples[0] if samples else bench_io.random_feed(holder["session"].inputs(), seed)

    try:
        result = harness.benchmark(create, make_feed, warmup, runs)
    except BenchError:
        raise
    except Exception as exc:  # the runtime rejected the feed: deterministic, not worth a retry
        raise BenchError(f"inference failed: {common.first_line(exc)}") from exc
    session = holder["session"]
    response: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "ok": True,
        "runtime": session.name,
        "runtime_version": session.version,
        "providers": session.providers,
        "threads": session.threads,
        "device": bench_io.device_info(),
        "inputs": session.inputs(),
        "timed_feed": "sample 0" if samples else f"random, seed {seed}",
        **result.as_dict(),
        "outputs": None,
    }
    if request.get("outputs"):
        if not samples:
            raise BenchError("outputs requested without samples")
        response["outputs"] = write_outputs(_resolve(base, request["outputs"], "outputs"), session, samples)
    feed = make_feed()
    # the timed session is done with: its weights would sit beside the next session's copy
    del session
    holder.clear()
    timed_ms = float(response["latency_ms"]["p50"])
    if request.get("baseline"):
        response["baseline"] = time_baseline(runtime, base, request, feed, warmup, runs, timed_ms, model)
    profile = request.get("profile")
    if profile:
        response["profile"] = run_profile(
            runtime, model, dict(request.get("options", {})), feed, dict(profile), base, timed_ms
        )
    if samples:
        samples.close()
    return response


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backends.runners.benchprog REQUEST.json", file=sys.stderr)
        return EXIT_FAILED
    try:
        response = run(Path(args[0]))
    except BenchError as exc:
        print(
            json.dumps({"format_version": FORMAT_VERSION, "ok": False, "error": str(exc), "kind": exc.kind})
        )
        return EXIT_FAILED
    except MemoryError:
        traceback.print_exc()
        print(
            json.dumps(
                {"format_version": FORMAT_VERSION, "ok": False, "error": "out of memory", "kind": "transient"}
            )
        )
        return EXIT_FAILED
    sys.stdout.write(json.dumps(response, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
