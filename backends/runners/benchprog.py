"""The benchmark program every runner executes: `python -m backends.runners.benchprog REQUEST.json`.

Standalone by design: it imports only the standard library, numpy, the runtime named in the request
and the shared harness (`backends.harness`, or `harness.py` copied beside this file), because the ssh
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
     "profile": {"runs": 20} | absent}
`samples.npz` holds key "s{i:06d}_{j}" = sample i's array for sample_inputs[j]. Timing uses sample 0,
or a random feed from `seed` when there are no samples. With `outputs`, every sample is run once more
after timing and its outputs are written as "s{i:06d}_{k}" for the k-th output name.

Response (one JSON line on stdout):
    {"format_version": 1, "ok": true, "runtime": "onnxruntime", "runtime_version": "1.32.0",
     "providers": ["CPUExecutionProvider"], "threads": 2,
     "device": {"cpu", "cpus", "machine", "system", "release", "python", "numpy"},
     "inputs": [{"name", "shape", "dtype"}], "timed_feed": "sample 0" | "random, seed 0",
     "latency_ms": {"p50", "p90", "p95", "p99", "mean", "min", "max", "stdev", "runs", "warmup",
                    "samples": [ms, ...]},
     "memory": {"peak_rss_mb", "baseline_rss_mb", "delta_mb", "peak_reset"}, "load_ms": 12.3,
     "outputs": {"file": "outputs.npz", "names": [...], "samples": 3} | null,
     "profile": {"available": true, "how", "layers": [{"name", "op_type", "provider", "time_us"}],
                 "runs": [{"kernels_us", "runtime_us", "wall_us"}]} (only when requested)}
The profile runs last, as separate iterations on a second session: it never touches the timed runs.
Failure: {"format_version": 1, "ok": false, "error": "one line", "kind": "terminal" | "transient"}, exit 2.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

FORMAT_VERSION = 1
EXIT_FAILED = 2


class BenchError(Exception):
    """A failure benchprog can explain; `kind` is "terminal" (bad request or model) or "transient"."""

    def __init__(self, message: str, kind: str = "terminal") -> None:
        super().__init__(message)
        self.kind = kind


def _harness() -> ModuleType:
    try:
        return importlib.import_module("backends.harness")
    except ImportError:  # run by path (isolated, npuctl not installed) or copied to a device beside it
        here = Path(__file__).resolve().parent
        for candidate in (here / "harness.py", here.parent / "harness.py"):
            if candidate.is_file():
                return _load_file("harness", candidate)
        raise


def _load_file(name: str, path: Path) -> ModuleType:
    """A module from a file beside this one, without putting its folder on sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sample_key(sample: int, position: int) -> str:
    return f"s{sample:06d}_{position}"


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
    class with the same methods and an entry in RUNTIMES."""

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
            raise BenchError(f"onnxruntime cannot load {model.name}: {_first_line(exc)}") from exc
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

    @classmethod
    def profile(
        cls, model: Path, options: dict[str, Any], feed: dict[str, Any], runs: int, folder: Path
    ) -> dict[str, Any]:
        """`runs` iterations on a second session with ORT's profiler on (after the timed runs, so the
        profiler cannot disturb them): per node the median kernel time and the provider that ran it,
        and per run the kernels' sum, ORT's own whole-run time and the wall time around `run`."""
        session = cls(model, {**options, "profile_prefix": str(folder / "ort-profile")})
        timing = _harness().time_runs(session.infer, feed, PROFILE_WARMUP, runs)
        trace = Path(session._sess.end_profiling())
        try:
            events = json.loads(trace.read_text())
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read onnxruntime's profile {trace.name}: {_first_line(exc)}") from exc
        finally:
            trace.unlink(missing_ok=True)
        return ort_trace_summary(events, timing.samples_ns)


class OvSession:
    """OpenVINO (added by the openvino backend): reads an IR (model.xml + model.bin beside it) and
    compiles it for options["device"] with options["properties"] (PERFORMANCE_HINT, threads, streams,
    INFERENCE_PRECISION_HINT: always explicit, so an AMX CPU does not silently run bf16)."""

    name = "openvino"

    @staticmethod
    def preload() -> None:
        try:
            import openvino  # noqa: F401
        except ImportError as exc:
            raise BenchError(
                f"openvino is not installed here ({_first_line(exc)}): pip install openvino"
            ) from exc

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        import openvino as ov

        self._ov = ov
        device = str(options.get("device", "CPU"))
        properties = {str(k): str(v) for k, v in dict(options.get("properties", {})).items()}
        try:
            core = ov.Core()
            self._compiled = core.compile_model(core.read_model(str(model)), device, properties)
        except Exception as exc:  # OpenVINO raises its own exception types
            raise BenchError(
                f"openvino cannot compile {model.name} for {device}: {_first_line(exc)}"
            ) from exc
        self._request = self._compiled.create_infer_request()
        self.device = device
        self.threads = int(self._property("INFERENCE_NUM_THREADS", 0))
        self.output_names = [o.get_any_name() for o in self._compiled.outputs]
        self.effective = {
            key: _ov_text(self._property(key, ""))
            for key in (
                "PERFORMANCE_HINT",
                "NUM_STREAMS",
                "INFERENCE_NUM_THREADS",
                "INFERENCE_PRECISION_HINT",
            )
        }

    def _property(self, key: str, default: Any) -> Any:
        try:
            return self._compiled.get_property(key)
        except Exception:  # a plugin without this property
            return default

    @property
    def version(self) -> str:
        return str(self._ov.get_version())

    @property
    def providers(self) -> list[str]:
        return [f"openvino:{self.device}"] + [f"{k}={v}" for k, v in sorted(self.effective.items())]

    def inputs(self) -> list[dict[str, Any]]:
        out = []
        for port in self._compiled.inputs:
            dtype = port.get_element_type().to_dtype().name
            out.append({"name": port.get_any_name(), "shape": list(port.get_shape()), "dtype": dtype})
        return out

    def infer(self, feed: dict[str, Any]) -> list[Any]:
        result = self._request.infer(feed)
        return [result[port] for port in self._compiled.outputs]

    @classmethod
    def profile(
        cls, model: Path, options: dict[str, Any], feed: dict[str, Any], runs: int, folder: Path
    ) -> dict[str, Any]:
        """`runs` iterations on a second compiled model with PERF_COUNT on: per executed layer the median
        real and CPU time, the layer type, and the kernel that ran it (its name carries the precision
        it ran in, e.g. "brgconv_avx512_I8")."""
        import time

        properties = {**dict(options.get("properties", {})), "PERF_COUNT": "YES"}
        session = cls(model, {**options, "properties": properties})
        for _ in range(PROFILE_WARMUP):
            session.infer(feed)
        per_run: list[dict[str, tuple[float, float]]] = []
        layers: dict[str, dict[str, Any]] = {}
        runs_out = []
        for _ in range(runs):
            start = time.perf_counter_ns()
            session.infer(feed)
            wall = time.perf_counter_ns() - start
            times: dict[str, tuple[float, float]] = {}
            for info in session._request.get_profiling_info():
                if str(info.status).rsplit(".", 1)[-1] != "EXECUTED":
                    continue
                layers.setdefault(
                    info.node_name,
                    {
                        "op_type": info.node_type,
                        "provider": f"openvino:{session.device}",
                        "exec_type": info.exec_type,
                    },
                )
                times[info.node_name] = (
                    info.real_time.total_seconds() * 1e6,
                    info.cpu_time.total_seconds() * 1e6,
                )
            per_run.append(times)
            runs_out.append({"kernels_us": sum(t for t, _ in times.values()), "wall_us": wall / 1e3})
        out = [
            {
                "name": name,
                **info,
                "time_us": _median([run.get(name, (0.0, 0.0))[0] for run in per_run]),
                "cpu_time_us": _median([run.get(name, (0.0, 0.0))[1] for run in per_run]),
            }
            for name, info in layers.items()
        ]
        return {"layers": out, "runs": runs_out}


class RknnLiteSession:
    """rknn-toolkit-lite2 on a Rockchip board (added by the rknn backend): loads the .rknn, binds the
    NPU cores of options["core_mask"], feeds options["inputs"] in order with their data_format."""

    name = "rknnlite"

    @staticmethod
    def preload() -> None:
        try:
            from rknnlite.api import RKNNLite  # noqa: F401
        except ImportError as exc:
            raise BenchError(
                f"rknn-toolkit-lite2 is not installed here ({_first_line(exc)}): pip install rknn-toolkit-lite2"
            ) from exc

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        from rknnlite.api import RKNNLite

        self._rknn = RKNNLite(verbose=False)
        if self._rknn.load_rknn(str(model)) != 0:
            raise BenchError(f"rknnlite cannot load {model.name}")
        self.core_mask = int(options.get("core_mask", 0))
        if self._rknn.init_runtime(core_mask=self.core_mask) != 0:
            raise BenchError(f"rknnlite init_runtime failed (core_mask {self.core_mask})", kind="transient")
        self._inputs = list(options.get("inputs", []))
        self._formats = [str(i.get("data_format", "nhwc")) for i in self._inputs]
        self.output_names = list(options.get("output_names", []))
        self.threads = 0

    @property
    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("rknn-toolkit-lite2")
        except PackageNotFoundError:
            return "unknown"

    @property
    def providers(self) -> list[str]:
        return [f"rknnlite:core_mask={self.core_mask}"]

    def inputs(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in i.items() if k != "data_format"} for i in self._inputs]

    def infer(self, feed: dict[str, Any]) -> list[Any]:
        outs = self._rknn.inference(inputs=[feed[i["name"]] for i in self._inputs], data_format=self._formats)
        if outs is None:
            raise BenchError("rknnlite inference returned no outputs")
        return list(outs)


class LiteRtSession:
    """A .tflite on LiteRT (ai-edge-litert), fed and read in the ONNX model's layout: options["io"] ties
    each TFLite tensor to its ONNX name, permutation (onnx2tf goes channels-last) and int quantization."""

    name = "litert"

    @staticmethod
    def preload() -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter  # noqa: F401
        except ImportError as exc:
            raise BenchError(f"ai-edge-litert is not installed here ({_first_line(exc)})") from exc

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.threads = int(options.get("threads", 0)) or None
        self._interpreter = Interpreter(model_path=str(model), num_threads=self.threads)
        self._interpreter.allocate_tensors()
        self._io = options["io"]
        index = {d["name"]: d["index"] for d in self._interpreter.get_input_details()}
        self._in = [(spec, index[spec["name"]]) for spec in self._io["inputs"]]
        index = {d["name"]: d["index"] for d in self._interpreter.get_output_details()}
        self._out = [(spec, index[spec["name"]]) for spec in self._io["outputs"]]
        self.output_names = [spec["onnx"] for spec in self._io["outputs"]]

    @property
    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ai-edge-litert")
        except PackageNotFoundError:
            return "unknown"

    @property
    def providers(self) -> list[str]:
        return ["LiteRT CPU (XNNPACK)"]

    def inputs(self) -> list[dict[str, Any]]:
        out = []
        for spec, _ in self._in:
            shape = list(spec["shape"])
            if spec["perm"]:
                shape = [shape[spec["perm"].index(i)] for i in range(len(shape))]
            out.append({"name": spec["onnx"], "shape": shape, "dtype": "float32"})
        return out

    def infer(self, feed: dict[str, Any]) -> list[Any]:
        import numpy as np

        for spec, index in self._in:
            x = np.asarray(feed[spec["onnx"]], dtype=np.float32)
            if spec["perm"]:
                x = x.transpose(spec["perm"])
            if spec["dtype"] not in ("float32", "float16"):
                info = np.iinfo(spec["dtype"])
                x = np.clip(np.round(x / spec["scale"] + spec["zero_point"]), info.min, info.max)
            self._interpreter.set_tensor(index, np.ascontiguousarray(x.astype(spec["dtype"])))
        self._interpreter.invoke()
        result = []
        for spec, index in self._out:
            y = self._interpreter.get_tensor(index)
            if spec["dtype"] not in ("float32", "float16"):
                y = (y.astype(np.float32) - spec["zero_point"]) * spec["scale"]
            if spec["perm"]:
                y = y.transpose(np.argsort(spec["perm"]))
            result.append(np.asarray(y, dtype=np.float32))
        return result


PROFILE_WARMUP = 2
"""Untimed runs of the profiling session before its profiled runs (the first run allocates)."""


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ort_trace_summary(events: list[dict[str, Any]], wall_ns: list[int]) -> dict[str, Any]:
    """ORT's chrome-trace events reduced to what a profile needs. Each node's kernel event is billed to
    the `model_run` window it falls in; only the last len(wall_ns) runs (the profiled ones) count."""
    windows = sorted(
        (int(e["ts"]), int(e["ts"]) + int(e["dur"]))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[-len(wall_ns) :]
    per_run: list[dict[str, float]] = [{} for _ in windows]
    nodes: dict[str, dict[str, Any]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        ts = int(e["ts"])
        run = next((i for i, (a, b) in enumerate(windows) if a <= ts <= b), None)
        if run is None:
            continue
        node = name[: -len("_kernel_time")]
        args = e.get("args") or {}
        outputs = args.get("output_type_shape") or [{}]
        nodes.setdefault(
            node,
            {
                "op_type": args.get("op_name"),
                "provider": args.get("provider"),
                "output_type": next(iter(outputs[0]), None) if isinstance(outputs[0], dict) else None,
            },
        )
        per_run[run][node] = per_run[run].get(node, 0.0) + float(e["dur"])
    layers = [
        {"name": node, **info, "time_us": _median([run.get(node, 0.0) for run in per_run])}
        for node, info in nodes.items()
    ]
    runs = [
        {"kernels_us": sum(run.values()), "runtime_us": float(b - a), "wall_us": wall / 1e3}
        for run, (a, b), wall in zip(per_run, windows, wall_ns[-len(windows) :], strict=True)
    ]
    return {"layers": layers, "runs": runs}


def run_profile(
    runtime: Any, model: Path, options: dict[str, Any], feed: Any, runs: int, folder: Path
) -> dict[str, Any]:
    """The runtime's own per-layer profile, or why there is none."""
    if not hasattr(runtime, "profile"):
        return {"available": False, "reason": f"benchprog has no profiler for {runtime.name}"}
    out = runtime.profile(model, options, feed, runs, folder)
    out["available"] = True
    out["how"] = (
        f"{runs} separate iterations on a second session with profiling on, after the timed runs "
        f"({PROFILE_WARMUP} warm-up): the timed latency was taken without the profiler"
    )
    return out


def _ov_text(value: Any) -> str:
    """An OpenVINO property value as text ("f32", not "<Type: 'float32'>")."""
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)


RUNTIMES: dict[str, Any] = {
    "onnxruntime": OrtSession,
    "openvino": OvSession,
    "rknnlite": RknnLiteSession,
    "litert": LiteRtSession,
}


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


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


def write_outputs(path: Path, session: OrtSession, samples: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Each sample's outputs, written as soon as they are computed."""
    count = write_samples(path, (session.infer(feed) for feed in samples))
    return {"file": path.name, "names": session.output_names, "samples": count}


def _resolve(base: Path, value: Any, what: str) -> Path:
    if not isinstance(value, str) or not value:
        raise BenchError(f"request field {what!r} must be a file name")
    path = Path(value)
    return path if path.is_absolute() else base / path


def run(request_path: Path) -> dict[str, Any]:
    try:
        request = json.loads(request_path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read request {request_path}: {_first_line(exc)}") from exc
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
    samples: NpzSamples | None = None
    if request.get("samples"):
        samples = NpzSamples(
            _resolve(base, request["samples"], "samples"), list(request.get("sample_inputs", []))
        )
    harness = _harness()
    runtime.preload()
    holder: dict[str, OrtSession] = {}

    def create() -> Any:
        holder["session"] = runtime(model, dict(request.get("options", {})))
        return holder["session"].infer

    seed = int(request.get("seed", 0))

    def make_feed() -> dict[str, Any]:
        return samples[0] if samples else random_feed(holder["session"].inputs(), seed)

    try:
        result = harness.benchmark(create, make_feed, warmup, runs)
    except BenchError:
        raise
    except Exception as exc:  # the runtime rejected the feed: deterministic, not worth a retry
        raise BenchError(f"inference failed: {_first_line(exc)}") from exc
    session = holder["session"]
    response: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "ok": True,
        "runtime": session.name,
        "runtime_version": session.version,
        "providers": session.providers,
        "threads": session.threads,
        "device": device_info(),
        "inputs": session.inputs(),
        "timed_feed": "sample 0" if samples else f"random, seed {seed}",
        **result.as_dict(),
        "outputs": None,
    }
    if request.get("outputs"):
        if not samples:
            raise BenchError("outputs requested without samples")
        response["outputs"] = write_outputs(_resolve(base, request["outputs"], "outputs"), session, samples)
    profile = request.get("profile")
    if profile:
        response["profile"] = run_profile(
            runtime, model, dict(request.get("options", {})), make_feed(), int(profile.get("runs", 20)), base
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
