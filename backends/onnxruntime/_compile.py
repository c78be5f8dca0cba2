"""compile for onnxruntime: graph optimization at the spec's level, saved in ORT format, byte-reproducible.

ORT's own ORT-format save is not reproducible (hash-map order in the kernel-type-string resolver, and
at level 3 the NCHWc transformer's node order and names), so the artifact is made in three steps:
1. optimize at the spec's level with the fusion switches' optimizers disabled, saved as ONNX;
2. canonicalize that graph (ORT-made names from content, canonical node order) — _canonical;
3. convert it to ORT format with optimizations off, then rewrite the flatbuffer canonically — _ortformat.
The .ort is then loaded and run once against the optimized ONNX it came from (same kernels: must agree).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from backends.onnxruntime import OPTIMIZATION_LEVELS, disabled_optimizers, fingerprint, validate_options
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line

SESSION_FORMAT = 1


def _log(path: Path, message: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(message.rstrip("\n") + "\n")


class CompilePass:
    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("compile: no model given")
        settings = session_settings(request.config)
        _check_batch(Path(source), int((request.config.get("compile") or {}).get("batch", 1)))
        workdir = Path(request.workdir)
        artifact = workdir / "model.ort"
        _log(request.log, f"compile {source} -> {artifact}: {json.dumps(settings, sort_keys=True)}")
        details = compile_ort(Path(source), artifact, settings, request.log)
        session_file = workdir / "session.json"
        session_file.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
        check = check_ort(request, artifact, settings, Path(source))
        report = {
            "check": check,
            "artifact": {"file": artifact.name, "size_bytes": artifact.stat().st_size},
            "session": settings,
            **details,
        }
        from backends.sdk.artifact_check import summary

        note = f"ORT format, level {settings['graph_optimization_level']}; {summary(check)}"
        if not details["reproducible"]:
            note += f"; WARNING: bytes not canonical ({details['canonical_error']})"
        return StageOutput(artifacts={"ort": artifact, "session": session_file}, report=report, note=note)


def check_ort(
    request: StageRequest, artifact: Path, settings: dict[str, Any], source: Path
) -> dict[str, Any]:
    """The .ort loaded as evaluate loads it (benchprog's session class and options) and run on the
    check samples, against the source ONNX; a disagreement fails this compile
    (backends.sdk.artifact_check). In this stage's own process: the outputs are all it needs (no
    timing, no memory), and the stage is already a child the engine survives a crash of."""
    from backends.onnxruntime._evaluate import load_options
    from backends.passes.accuracy import ModelOutputs
    from backends.passes.data import model_inputs
    from backends.runners.bench_common import BenchError
    from backends.runners.bench_ort import OrtSession
    from backends.sdk import artifact_check as A

    inputs = model_inputs(source)
    samples, data = A.check_samples(request, inputs)
    try:
        session = OrtSession(artifact, load_options(settings))
        outputs = ModelOutputs(session.output_names, [session.infer(s.feed) for s in samples])
    except BenchError as exc:
        raise TerminalError(f"compile: {exc}") from exc
    except Exception as exc:  # ORT raises its own exception types on a feed it refuses
        raise TerminalError(f"compile: the .ort cannot run the check samples: {one_line(exc)}") from exc
    del session
    quantized = settings.get("quantization_mode") in ("ptq", "qat") or A.quantized_source(source)
    limit = A.tolerance("f32", quantized)
    what = f"compile: the .ort (level {settings['graph_optimization_level']})"
    return A.judge(request, source, samples, outputs, limit, what, data)


def session_settings(config: Any) -> dict[str, Any]:
    """session.json: everything evaluate (or a device app) needs to run the artifact as compiled."""
    compile_cfg = config.get("compile") or {}
    options = validate_options(compile_cfg.get("options") or {})
    level = compile_cfg.get("optimization_level", 3)
    if level not in OPTIMIZATION_LEVELS:
        raise TerminalError(f"compile.optimization_level must be 0-3, got {level!r}")
    cores = compile_cfg.get("cores")
    return {
        "format_version": SESSION_FORMAT,
        "runtime": "onnxruntime",
        "artifact": "model.ort",
        "graph_optimization_level": OPTIMIZATION_LEVELS[level],
        "load_optimization_level": "disable_all",
        "disabled_optimizers": disabled_optimizers(config.get("rewrite.fusion") or {}),
        "intra_op_num_threads": int(cores) if cores else 0,
        "inter_op_num_threads": options["inter_op_num_threads"],
        "execution_mode": options["execution_mode"],
        "enable_mem_pattern": options["enable_mem_pattern"],
        "enable_cpu_mem_arena": options["enable_cpu_mem_arena"],
        "providers": ["CPUExecutionProvider"],
        "quantization_mode": config.get("quantization.mode") or "none",
    }


def _check_batch(model: Path, batch: int) -> None:
    """ORT runs the shapes import fixed; a compile.batch other than 1 must agree with them."""
    if batch == 1:
        return
    from backends.passes.data import model_inputs

    for spec in model_inputs(model):
        if not spec.shape or spec.shape[0] != batch:
            raise TerminalError(
                f"compile.batch is {batch} but input {spec.name} has shape {list(spec.shape)}: onnxruntime "
                "runs the shapes in spec.inputs, so set the batch there"
            )


def _ort() -> Any:
    import onnxruntime

    return onnxruntime


def _session_options(level: str, threads: int = 1) -> Any:
    """For sessions that only transform and save the graph: no prepacked weight copies, no arena."""
    ort = _ort()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    names = {"disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}
    names["all"] = "ORT_ENABLE_ALL"
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, names[level])
    return options


def optimize(source: Path, out: Path, level: str, disabled: list[str]) -> None:
    """ORT's graph optimization at `level`, written as ONNX to `out`."""
    ort = _ort()
    options = _session_options(level)
    options.optimized_model_filepath = str(out)
    try:
        ort.InferenceSession(
            str(source), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
        )
    except Exception as exc:  # ORT raises its own exception types
        raise TerminalError(f"onnxruntime cannot optimize {source.name}: {one_line(exc)}") from exc


def to_ort_format(model: Path, out: Path) -> None:
    """Converts an (already optimized) ONNX model to ORT format without changing its graph."""
    ort = _ort()
    options = _session_options("disable_all")
    options.optimized_model_filepath = str(out)
    options.add_session_config_entry("session.save_model_format", "ORT")
    try:
        ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types
        raise TerminalError(f"onnxruntime cannot save {model.name} in ORT format: {one_line(exc)}") from exc


def compile_ort(source: Path, artifact: Path, settings: dict[str, Any], log: Path) -> dict[str, Any]:
    """Writes the canonical .ort for `source`; returns the report details."""
    import onnx

    from backends.onnxruntime._canonical import canonicalize
    from backends.onnxruntime._ortformat import UnknownField, canonical_bytes

    source_model = _skimmed(source)  # names only: its weights are never read here
    with tempfile.TemporaryDirectory(dir=artifact.parent, prefix=".scratch-ort-") as tmp:
        optimized_path, canonical_path, raw_path = (
            Path(tmp) / n for n in ("opt.onnx", "canon.onnx", "raw.ort")
        )
        optimize(
            source, optimized_path, settings["graph_optimization_level"], settings["disabled_optimizers"]
        )
        optimized = canonicalize(onnx.load(str(optimized_path)), source_model)
        nodes_after, ops_after = len(optimized.graph.node), _histogram(optimized)
        _save_canonical(optimized, canonical_path)
        del optimized  # each step below holds the weights itself: free them before it starts
        to_ort_format(canonical_path, raw_path)
        raw = raw_path.read_bytes()
        error = ""
        data: bytes | memoryview
        try:
            data = canonical_bytes(raw)
        except (UnknownField, ValueError) as exc:
            data, error = raw, one_line(exc)
            _log(log, f"WARNING: .ort left as ONNX Runtime wrote it, not byte-reproducible: {error}")
        artifact.write_bytes(data)
        del raw, data
        max_diff = _agrees(canonical_path, artifact, log)
    _log(log, f"optimized graph: {nodes_after} nodes; .ort vs optimized ONNX max |diff| {max_diff:g}")
    return {
        "nodes_before": len(source_model.graph.node),
        "nodes_after": nodes_after,
        "ops_after": ops_after,
        "reproducible": not error,
        "canonical_error": error,
        "check_max_abs_diff": max_diff,
    }


EXTERNAL_BYTES = 16 << 20
"""Initializers at least this large go to the canonical ONNX's external data file (one per model); far
above any shape tensor's size, which ORT's shape inference cannot read from external data."""


def _save_canonical(model: Any, path: Path) -> None:
    """The canonical ONNX for the ORT-format conversion, its large weights in a file beside it: ORT
    then reads them from there instead of holding the parsed model's copy as well, and the proto's
    serialization is small (the .ort ORT writes from it is the same: measured). Small models are
    written whole, as before."""
    import onnx

    from backends.passes.facts import DTYPE_BYTES

    # sized from the dims: ByteSize() and reading raw_data both copy the tensor
    large = any(
        math.prod(t.dims) * DTYPE_BYTES.get(t.data_type, 1) >= EXTERNAL_BYTES for t in model.graph.initializer
    )
    if not large:
        path.write_bytes(model.SerializeToString(deterministic=True))
        return
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{path.name}.data",
        size_threshold=EXTERNAL_BYTES,
        convert_attribute=False,
    )


def _skimmed(path: Path) -> Any:
    """The model's graph without the data of its large initializers (backends.passes.skim)."""
    import onnx

    from backends.passes.skim import skim

    with path.open("rb") as fh:
        return onnx.load_from_string(skim(fh, path.stat().st_size))


def _histogram(model: Any) -> dict[str, int]:
    ops = Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node
    )
    return dict(sorted(ops.items()))


def _agrees(reference: Path, artifact: Path, log: Path | None = None) -> float:
    """Runs the .ort and the ONNX it was converted from on one random feed; they run the same graph
    with the same kernels, so any difference means the conversion broke something."""
    import numpy as np

    from backends.passes.accuracy import run_model
    from backends.passes.data import model_inputs, random_feed

    inputs = model_inputs(reference)
    feed = random_feed(inputs, seed=0)
    expected = run_model(reference, [feed], level="disable_all").values[0]
    got = _artifact_outputs(artifact, feed, inputs, log)
    worst = 0.0
    for e, g in zip(expected, got, strict=True):
        if e.shape != g.shape or not np.allclose(e, g, rtol=1e-5, atol=1e-6, equal_nan=True):
            diff = (
                float(np.abs(e.astype(np.float64) - g.astype(np.float64)).max()) if e.shape == g.shape else -1
            )
            raise TerminalError(
                f"the .ort artifact disagrees with the optimized graph it was saved from ({diff:g})"
            )
        if e.size and np.issubdtype(e.dtype, np.number):
            worst = max(worst, float(np.nanmax(np.abs(e.astype(np.float64) - g.astype(np.float64)))))
    return worst


AGREE_IN_PROCESS_BYTES = 64 << 20
"""A larger .ort is run for `_agrees` by benchprog, in a process of its own (see _artifact_outputs)."""


def _artifact_outputs(artifact: Path, feed: dict[str, Any], inputs: list[Any], log: Path | None) -> list[Any]:
    """The .ort's outputs on `feed` as run_model gives them (one thread, loaded as saved). A large one
    runs in a fresh benchprog process: ONNX Runtime holds an .ort's weights three times while it
    loads it (the file, the parsed tensors, the session's), which on top of this long-lived child's
    own footprint made compile the largest process of an apply."""
    from backends.passes.accuracy import run_model

    if artifact.stat().st_size < AGREE_IN_PROCESS_BYTES:
        return list(run_model(artifact, [feed]).values[0])
    from backends.passes.data import Sample
    from backends.runners import write_request
    from backends.runners.benchprog import FORMAT_VERSION
    from backends.runners.local import LocalRunner
    from backends.sdk.measure import read_outputs, write_job_samples

    with tempfile.TemporaryDirectory(dir=artifact.parent, prefix=".scratch-ort-agree-") as tmp:
        job = Path(tmp)
        try:
            os.link(artifact, job / "model.ort")
        except OSError:
            shutil.copyfile(artifact, job / "model.ort")
        write_job_samples(job / "samples.npz", [Sample("random-0", feed)], inputs)
        write_request(
            job,
            {
                "format_version": FORMAT_VERSION,
                "runtime": "onnxruntime",
                "model": "model.ort",
                "options": {
                    "intra_op_num_threads": 1,
                    "inter_op_num_threads": 1,
                    "graph_optimization_level": "disable_all",
                },
                "warmup": 0,
                "runs": 1,
                "seed": 0,
                "samples": "samples.npz",
                "sample_inputs": [spec.name for spec in inputs],
                "outputs": "outputs.npz",
            },
        )
        result = LocalRunner().run(job, 600.0, log)
        return list(read_outputs(job, result).values[0])
