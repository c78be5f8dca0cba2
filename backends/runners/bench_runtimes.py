"""The other runtimes benchprog drives (OpenVINO, rknn-toolkit-lite2, LiteRT), each behind the same
small interface as bench_ort.OrtSession: preload(), a constructor from (model, options), version,
providers, inputs(), infer(feed), and profile() where the runtime has a profiler. Each imports its
runtime lazily: a device has only the one it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from backends.runners import bench_common as common
except ImportError:  # copied beside benchprog.py on a device: benchprog loaded it under this name
    import bench_common as common  # type: ignore[no-redef]

BenchError = common.BenchError
_first_line = common.first_line
_median = common.median
PROFILE_WARMUP = common.PROFILE_WARMUP


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
    each TFLite tensor to its ONNX name, permutation (onnx2tf goes channels-last) and int quantization.

    `infer` (what is timed) runs LiteRT as an app on this host would, XNNPACK delegate and all.
    `outputs` (what is scored) runs TFLite's reference kernels when options["reference_outputs"] is
    set, as it is for an integer model: the reference is what an NPU compiler is bit-exact with (vela
    with TFLite Micro's kernels), and the faster kernel libraries round int8 their own way. On a
    YOLOv8-seg whose decode stays float inside an int8 body, XNNPACK's outputs scored box F1 0 against
    the float model where the reference scores 0.95; on a PicoDet, TFLite's optimized built-in kernels
    scored 0.4 where the reference (and XNNPACK) score 0.6. The reference is slow (a second per
    800x608 inference), so only the scored samples run on it."""

    name = "litert"

    @staticmethod
    def preload() -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter  # noqa: F401
        except ImportError as exc:
            raise BenchError(f"ai-edge-litert is not installed here ({_first_line(exc)})") from exc

    def __init__(self, model: Path, options: dict[str, Any]) -> None:
        self.threads = int(options.get("threads", 0)) or None
        self._model = model
        self._interpreter = self._load()
        self._reference: Any = None if options.get("reference_outputs") else self._interpreter
        self._io = options["io"]
        index = {d["name"]: d["index"] for d in self._interpreter.get_input_details()}
        self._in = [(spec, index[spec["name"]]) for spec in self._io["inputs"]]
        index = {d["name"]: d["index"] for d in self._interpreter.get_output_details()}
        self._out = [(spec, index[spec["name"]]) for spec in self._io["outputs"]]
        self.output_names = [spec["onnx"] for spec in self._io["outputs"]]

    def _load(self, reference: bool = False) -> Any:
        """The interpreter on the reference kernels, or as an app gets it; where the XNNPACK delegate
        refuses a graph ("failed to create XNNPACK runtime": a large unrolled LSTM), on the built-in
        kernels without it: the same ops, and the NPU runs neither."""
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        kinds = (
            [OpResolverType.BUILTIN_REF]
            if reference
            else [None, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES]
        )
        for kind in kinds:
            extra = {} if kind is None else {"experimental_op_resolver_type": kind}
            interpreter = Interpreter(model_path=str(self._model), num_threads=self.threads, **extra)
            try:
                interpreter.allocate_tensors()
            except RuntimeError as exc:
                if kind is not None or "xnnpack" not in str(exc).lower():
                    raise
                continue
            return interpreter
        raise AssertionError("unreachable: the last kind raises")

    @property
    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ai-edge-litert")
        except PackageNotFoundError:
            return "unknown"

    @property
    def providers(self) -> list[str]:
        scored = "reference kernels" if self._reference is not self._interpreter else "the same"
        return [f"LiteRT CPU (XNNPACK; outputs scored on {scored})"]

    def inputs(self) -> list[dict[str, Any]]:
        out = []
        for spec, _ in self._in:
            shape = list(spec["shape"])
            if spec["perm"]:
                shape = [shape[spec["perm"].index(i)] for i in range(len(shape))]
            dtype = "float32" if spec["scale"] or spec["dtype"] in ("float32", "float16") else spec["dtype"]
            out.append({"name": spec["onnx"], "shape": shape, "dtype": dtype})
        return out

    def infer(self, feed: dict[str, Any]) -> list[Any]:
        return self._run(self._interpreter, feed)

    def outputs(self, feed: dict[str, Any]) -> list[Any]:
        if self._reference is None:
            self._reference = self._load(reference=True)
        return self._run(self._reference, feed)

    def _run(self, interpreter: Any, feed: dict[str, Any]) -> list[Any]:
        import numpy as np

        for spec, index in self._in:
            x = np.asarray(feed[spec["onnx"]])
            if spec["perm"]:
                x = x.transpose(spec["perm"])
            if spec["scale"] and spec["dtype"] not in ("float32", "float16"):  # quantized, not integer ids
                info = np.iinfo(spec["dtype"])
                x = np.clip(np.round(x / spec["scale"] + spec["zero_point"]), info.min, info.max)
            interpreter.set_tensor(index, np.require(x.astype(spec["dtype"]), requirements="C"))
        interpreter.invoke()
        result = []
        for spec, index in self._out:
            y = interpreter.get_tensor(index)
            if spec["scale"] and spec["dtype"] not in ("float32", "float16"):
                y = (y.astype(np.float32) - spec["zero_point"]) * spec["scale"]
            if spec["perm"]:
                y = y.transpose(np.argsort(spec["perm"]))
            result.append(np.asarray(y, dtype=np.float32))
        return result


def _ov_text(value: Any) -> str:
    """An OpenVINO property value as text ("f32", not "<Type: 'float32'>")."""
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)
