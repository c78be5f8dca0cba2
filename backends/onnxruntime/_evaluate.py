"""evaluate for onnxruntime: the compiled .ort measured through a runner, scored against the float model.

Latency and memory come from benchprog (the shared harness) in a separate process, so they are the
artifact's own numbers; the artifact's outputs on the evaluation samples come back from the same run.
The float reference runs here, on the host, and the one accuracy implementation scores both.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends import tasks
from backends.base import StageOutput, StageRequest
from backends.errors import TerminalError
from backends.evidence import about_host, cpu_name
from backends.onnx.accuracy import AccuracyResult, ModelOutputs, Tally, iter_outputs
from backends.onnx.data import (
    InputSpec,
    Sample,
    SampleSet,
    model_inputs,
    random_samples,
    sample_set,
)
from backends.onnxruntime import fingerprint
from backends.runners import Runner, runner_for, write_request

if TYPE_CHECKING:
    import numpy as np

RANDOM_SAMPLES = 8
"""Samples drawn (seed 0) for fidelity when the spec gives no evaluation data."""

_LATENCY_KEYS = ("p50", "p90", "p95", "p99", "mean")


class EvaluatePass:
    stage = "evaluate"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        cfg = dict(request.config.get("evaluate") or {})
        runner = runner_for(str(cfg.get("runner", "local")))
        artifact, settings = _compiled(request)
        model, reference_model = _models(request)
        inputs = model_inputs(model)
        samples, data_source = _samples(request, inputs)
        task, labels = task_and_labels(request, samples, reference_model)
        threads = int(settings.get("intra_op_num_threads", 0))
        with tempfile.TemporaryDirectory(prefix="npuctl-eval-") as tmp:
            job = Path(tmp)
            _prepare_job(job, artifact, settings, samples, inputs, cfg)
            result = runner.run(job, float(cfg.get("timeout_s", 600)), request.log)
            accuracy = score_job(job, result, reference_model, samples, labels, task, threads)
        found = measurements(result, runner, accuracy, artifact, data_source)
        about_host(found, request.target, f"onnxruntime CPU on {cpu_name(result)} via {runner.describe()}")
        report = {
            "measurements": found,
            "runner": runner.describe(),
            "runtime": {k: result.get(k) for k in ("runtime", "runtime_version", "providers", "threads")},
            "device": result.get("device"),
            "latency_ms": result["latency_ms"],
            "memory": result["memory"],
            "load_ms": result.get("load_ms"),
            "timed_feed": result.get("timed_feed"),
            "accuracy": accuracy.as_dict(),
            "data": {"source": data_source, "samples": len(samples)},
            "artifact": {"file": artifact.name, "size_bytes": artifact.stat().st_size},
            "session": settings,
        }
        lat = result["latency_ms"]
        note = f"p50 {lat['p50']:.3f} ms, p90 {lat['p90']:.3f} ms, {accuracy.note()}"
        artifacts = {}
        profile = record_profile(request, result, artifact, model, runner.evidence)
        if profile is not None:
            from backends import profiles  # imports onnx: only once a profile exists

            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        return StageOutput(artifacts=artifacts, report=report, note=note)


def record_profile(
    request: StageRequest, result: dict[str, Any], artifact: Path, model: Path, evidence: str
) -> dict[str, Any] | None:
    """benchprog's trace mapped onto the deployed model, costed and attributed; None when the runner
    gave no profile (an older benchprog on a device)."""
    from backends import profiles
    from backends.onnx.facts import load_light
    from backends.onnxruntime._profile import runtime_layers
    from backends.profiles.suggest import suggest

    trace = result.get("profile") or {}
    if not trace.get("available"):
        return None
    layers = runtime_layers(trace, artifact, model)
    placement = _placement(request)
    deployed = load_light(model)  # costs and suggestions read shapes, never the weights' values
    profiles.with_costs(layers, deployed, placement)
    how = str(trace.get("how"))
    if trace.get("calibration"):
        how += "; each layer's time_ms is onnxruntime's kernel time less that cost (raw_time_ms: as reported)"
    profile = profiles.build(
        runtime=f"{result.get('runtime')} {result.get('runtime_version')}",
        evidence=evidence,
        how=how,
        layers=layers,
        runs=list(trace.get("runs") or []),
        timed_p50_ms=float(result["latency_ms"]["p50"]),
        timed_cpu_p50_ms=result["latency_ms"].get("cpu_p50"),
        target=request.target,
        device_evidence=f"{evidence}: the execution provider onnxruntime names per node",
        profiler_cost=trace.get("calibration"),
        threads=int(result.get("threads") or 0),
    )
    if trace.get("noise"):
        profile["noise"] = trace["noise"]  # the profiled rounds, as the timed runs record theirs
    profile["suggestions"] = suggest(
        profile,
        request.target,
        float_model=_float_model(request),
        precision=placement.get("precision") or {},
        threads=int(result.get("threads") or 0),
        cpus=int((result.get("device") or {}).get("cpus") or 0),
        model=deployed,
    )
    return profile


def _float_model(request: StageRequest) -> Any:
    """The float model the rewrite rule dry-runs the rewrite library on (only with fallbacks to move)."""
    import onnx

    path = request.inputs.get("float_model")
    return onnx.load(str(path)) if path is not None and request.target.npu_cores > 0 else None


def _placement(request: StageRequest) -> dict[str, Any]:
    path = request.inputs.get("placement")
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise TerminalError(f"cannot read {Path(path).name}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _compiled(request: StageRequest) -> tuple[Path, dict[str, Any]]:
    artifact, session = request.inputs.get("ort"), request.inputs.get("session")
    if artifact is None or session is None:
        raise TerminalError("evaluate needs onnxruntime's compile artifacts (ort, session)")
    try:
        settings = json.loads(Path(session).read_text())
    except (OSError, ValueError) as exc:
        raise TerminalError(f"cannot read {Path(session).name}: {exc}") from exc
    return Path(artifact), settings


def _models(request: StageRequest) -> tuple[Path, Path]:
    model, reference = request.inputs.get("model"), request.inputs.get("float_model")
    if model is None or reference is None:
        raise TerminalError(
            "evaluate needs the quantized model and the float reference model (model, float_model)"
        )
    return Path(model), Path(reference)


Samples = list[Sample] | SampleSet
"""A list (random inputs) or a SampleSet (evaluate.data, read lazily on every pass)."""


def _samples(request: StageRequest, inputs: list[InputSpec]) -> tuple[Samples, str]:
    folder = request.inputs.get("eval_data")
    if folder is None:
        return random_samples(inputs, RANDOM_SAMPLES, seed=0), "random inputs (seed 0)"
    return sample_set(Path(folder), inputs, role="evaluate.data"), f"evaluate.data ({Path(folder).name})"


def task_and_labels(
    request: StageRequest, samples: Samples, reference_model: Path
) -> tuple[tasks.TaskConfig | None, list[Any] | None]:
    """The declared task (resolved against the float model's graph) and each sample's label."""
    from backends.tasks.setup import task_and_labels as for_request

    names = samples.names if isinstance(samples, SampleSet) else [s.name for s in samples]
    return for_request(request.config.get("evaluate"), request.inputs, reference_model, names)


def _prepare_job(
    job: Path,
    artifact: Path,
    settings: dict[str, Any],
    samples: Samples,
    inputs: list[InputSpec],
    cfg: Any,
) -> None:
    from backends.runners.benchprog import FORMAT_VERSION

    try:
        os.link(artifact, job / "model.ort")
    except OSError:
        shutil.copyfile(artifact, job / "model.ort")
    write_job_samples(job / "samples.npz", samples, inputs)
    from backends.onnxruntime._profile import probe_model

    (job / PROBE_FILE).write_bytes(probe_model())
    (job / PROBE_BASELINE_FILE).write_bytes(probe_model(1))
    options: dict[str, Any] = {
        key: settings[key]
        for key in (
            "intra_op_num_threads",
            "inter_op_num_threads",
            "execution_mode",
            "enable_mem_pattern",
            "enable_cpu_mem_arena",
            "disabled_optimizers",
            "providers",
        )
        if key in settings
    }
    options["graph_optimization_level"] = settings.get("load_optimization_level", "disable_all")
    write_request(
        job,
        {
            "format_version": FORMAT_VERSION,
            "runtime": "onnxruntime",
            "model": "model.ort",
            "options": options,
            "warmup": int(cfg.get("warmup", 10)),
            "runs": int(cfg.get("runs", 100)),
            "seed": 0,
            "samples": "samples.npz",
            "sample_inputs": [spec.name for spec in inputs],
            "outputs": "outputs.npz",
            "profile": {
                "runs": profile_runs(cfg),
                "probe": PROBE_FILE,
                "probe_baseline": PROBE_BASELINE_FILE,
            },
        },
    )


PROBE_FILE = "profiler-probe.onnx"
"""The probe graph benchprog profiles beside the model to measure the profiler's own per-node cost."""
PROBE_BASELINE_FILE = "profiler-probe-baseline.onnx"
"""The one-node-per-chain probe: unprofiled beside the full one, it measures a run's fixed cost."""

PROFILE_RUNS = 30
"""Profiled iterations at most (fewer when the spec times fewer): run after the timed ones. Each layer's
time is a middle mean over them, in whole microseconds: 30 kept PP-OCR's classifier and detector
within 15 % of the timed runs' CPU time on a busy 2-core host
(tests/e2e/test_profile_sums.py); what they add to evaluate's time: bench/profile.py."""


def profile_runs(cfg: Any) -> int:
    return max(3, min(PROFILE_RUNS, int(cfg.get("runs", 100))))


def write_job_samples(path: Path, samples: Samples, inputs: list[InputSpec]) -> None:
    """The runner's samples file, written one sample at a time."""
    from backends.runners.benchprog import write_samples

    write_samples(path, ([s.feed[spec.name] for spec in inputs] for s in samples))


def score_job(
    job: Path,
    result: dict[str, Any],
    reference_model: Path,
    samples: Samples,
    labels: list[Any] | None,
    task: tasks.TaskConfig | None,
    threads: int = 1,
) -> AccuracyResult:
    """Scores the runner's outputs against the float reference run here, one sample of each model in
    memory at a time, however large the evaluation set."""
    tally = Tally(_output_names(result), task, labels)
    _, reference = iter_outputs(reference_model, samples, threads)
    for ref, out in zip(reference, _runner_outputs(job, result, len(samples)), strict=True):
        tally.add(ref, out)
    return tally.result()


def read_outputs(job: Path, result: dict[str, Any]) -> ModelOutputs:
    """All of the runner's outputs in memory (for a caller that must reshape them first)."""
    count = int((result.get("outputs") or {}).get("samples", 0))
    return ModelOutputs(_output_names(result), list(_runner_outputs(job, result, count)))


def _output_names(result: dict[str, Any]) -> list[str]:
    return list((result.get("outputs") or {}).get("names", []))


def _runner_outputs(job: Path, result: dict[str, Any], expected: int) -> Iterator[list[np.ndarray]]:
    """The artifact's outputs as the runner wrote them, one sample at a time."""
    import numpy as np

    from backends.runners.benchprog import sample_key

    info = result.get("outputs") or {}
    names, count = _output_names(result), int(info.get("samples", 0))
    if count != expected:
        raise TerminalError(f"the runner returned outputs for {count} samples, {expected} were sent")
    try:
        with np.load(job / str(info.get("file", "outputs.npz")), allow_pickle=False) as archive:
            for i in range(count):
                yield [np.asarray(archive[sample_key(i, k)]) for k in range(len(names))]
    except (OSError, KeyError, ValueError) as exc:
        raise TerminalError(f"the runner returned no readable outputs: {exc}") from exc


def _runtime_detail(result: dict[str, Any], runner: Runner) -> str:
    threads = result.get("threads") or 0
    device = result.get("device") or {}
    return (
        f"{result.get('runtime')} {result.get('runtime_version')} {','.join(result.get('providers') or [])}, "
        f"{threads if threads else 'default'} threads, {device.get('cpu', 'unknown CPU')}, runner {runner.describe()}"
    )


def _accuracy_detail(accuracy: AccuracyResult, data_source: str) -> str:
    fid = accuracy.fidelity
    quality = f"cosine {fid.cosine:.6f}, SQNR {fid.sqnr_db:.1f} dB"
    return f"{accuracy.task}: {accuracy.text}, on {accuracy.samples} samples of {data_source}; {quality}"


def noise_text(latency: dict[str, Any]) -> str:
    """The spread of the timed runs, and the repeat when the machine looked busy, for verdict details."""
    noise = latency.get("noise") or {}
    if noise.get("suspected"):
        return f"; noisy host: {noise['why']}"
    ratio = noise.get("p90_over_p50")
    return f"; spread p90/p50 {ratio}" if ratio is not None else ""


def measurements(
    result: dict[str, Any], runner: Runner, accuracy: AccuracyResult, artifact: Path, data_source: str
) -> dict[str, dict[str, Any]]:
    """The report's `measurements`, in the format verify reads."""
    lat, memory = result["latency_ms"], result["memory"]
    runtime = _runtime_detail(result, runner)
    timing = (
        f"{runtime}; {lat.get('runs')} runs after {lat.get('warmup')} warm-up, {result.get('timed_feed')}"
        f"{noise_text(lat)}"
    )
    out: dict[str, dict[str, Any]] = {}
    for key in _LATENCY_KEYS:
        out[f"latency_ms.{key}"] = {
            "value": round(float(lat[key]), 6),
            "evidence": runner.evidence,
            "detail": timing,
        }
    bound = "" if memory.get("peak_reset") else " (lower bound: the peak could not be reset)"
    out["peak_memory_mb"] = {
        "value": round(float(memory["delta_mb"]), 3),
        "evidence": runner.evidence,
        "detail": f"peak RSS increase over the pre-session baseline{bound}; process peak "
        f"{float(memory['peak_rss_mb']):.1f} MB; {runtime}",
    }
    out["size_mb"] = {
        "value": round(artifact.stat().st_size / 1e6, 6),
        "evidence": "measured:host",
        "detail": f"{artifact.name} bytes (MB = 1e6 bytes)",
    }
    out["accuracy"] = {
        "value": accuracy.accuracy,
        "measure": f"{accuracy.task} {accuracy.metric}",
        "evidence": runner.evidence,
        "detail": f"{_accuracy_detail(accuracy, data_source)}; {runtime}",
    }
    reference = (
        f"{accuracy.task} {accuracy.metric} of the float model under onnxruntime on this host, same samples"
        if accuracy.labelled
        else f"{accuracy.metric}: the float model against itself (1.0 by definition)"
    )
    out["accuracy.reference"] = {
        "value": accuracy.reference,
        "evidence": "measured:host",
        "detail": reference,
    }
    return out
