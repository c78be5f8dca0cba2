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
from pathlib import Path
from typing import Any

from backends.onnxruntime import fingerprint
from backends.passes.data import InputSpec, model_inputs
from backends.runners import runner_for, write_request
from backends.sdk import measure
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.evidence import about_host, cpu_name
from backends.sdk.measure import Samples, measurements, score_job, task_and_labels
from backends.sdk.vocab import FLOAT_MEAN, PAIRED_MEAN, slower_than_float


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
        samples, data_source = measure.samples(request, inputs)
        task, labels = task_and_labels(request, samples, reference_model)
        threads = int(settings.get("intra_op_num_threads", 0))
        baseline = reference_model if _integer(model) else None
        with tempfile.TemporaryDirectory(prefix="npuctl-eval-") as tmp:
            job = Path(tmp)
            _prepare_job(job, artifact, settings, samples, inputs, cfg, baseline=baseline)
            result = runner.run(job, float(cfg.get("timeout_s", 600)), request.log)
            accuracy = score_job(job, result, reference_model, samples, labels, task, threads)
        found = measurements(result, runner, accuracy, artifact, data_source)
        if baseline is not None:
            found.update(_float_mean(baseline, settings, result, runner.evidence))
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
        slower = slower_than_float(found)
        if slower is not None:
            note += f"; {slower}"
        artifacts = {}
        profile = record_profile(request, result, artifact, model, runner.evidence)
        if profile is not None:
            from backends import profiles  # imports onnx: only once a profile exists

            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        return StageOutput(artifacts=artifacts, report=report, note=note)


INTEGER_OPS = frozenset(
    {
        "QuantizeLinear",
        "DynamicQuantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
    }
)
"""The ops an integer (int8/uint8) build of an ONNX model holds and its float source does not."""


def _integer(model: Path) -> bool:
    """Whether quantize made `model` an integer build: read from its graph, not from the spec."""
    from backends.passes.facts import load_light

    return any(node.op_type in INTEGER_OPS for node in load_light(model).graph.node)


def _float_mean(
    reference: Path, settings: dict[str, Any], result: dict[str, Any], evidence: str
) -> dict[str, dict[str, Any]]:
    """The float model's mean latency and the int8 artifact's, timed in alternation right after the
    artifact's own runs in the same benchprog run (same runner, harness, feed and session settings; the
    compile's optimization level applied to the float model at load, as the .ort had it applied before
    saving): the comparison an int8 build is made for, with no bias of which ran first."""
    timed = result.get("baseline")
    if not isinstance(timed, dict) or not isinstance(timed.get("paired_ms"), dict):
        raise TerminalError(
            "the runner's benchprog did not time the float model beside the artifact "
            "(no 'baseline' with 'paired_ms' in its answer)"
        )
    lat, paired = timed["latency_ms"], timed["paired_ms"]
    how = f"{lat.get('runs')} runs each after {lat.get('warmup')} warm-up, alternating which goes first"
    return {
        FLOAT_MEAN: {
            "value": round(float(lat["mean"]), 6),
            "evidence": evidence,
            "detail": f"the float model ({reference.name}) under the same runner and settings, graph "
            f"optimization {_load_level(settings)} at load, timed in alternation with the int8 artifact; {how}",
        },
        PAIRED_MEAN: {
            "value": round(float(paired["mean"]), 6),
            "evidence": evidence,
            "detail": f"the int8 artifact on a second session, timed in alternation with the float model; {how}",
        },
    }


def _load_level(settings: dict[str, Any]) -> str:
    """The float model's optimization level at load: the one the compile applied to the .ort."""
    return str(settings.get("graph_optimization_level", "all"))


def record_profile(
    request: StageRequest, result: dict[str, Any], artifact: Path, model: Path, evidence: str
) -> dict[str, Any] | None:
    """benchprog's trace mapped onto the deployed model, costed and attributed; None when the runner
    gave no profile (an older benchprog on a device)."""
    from backends import profiles
    from backends.onnxruntime._profile import runtime_layers
    from backends.passes.facts import load_light
    from backends.profiles.suggest import suggest

    trace = result.get("profile") or {}
    if not trace.get("available"):
        return None
    layers = runtime_layers(trace, artifact, model)
    placement = measure.placement(request)
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
        float_model=measure.float_model(request),
        precision=placement.get("precision") or {},
        threads=int(result.get("threads") or 0),
        cpus=int((result.get("device") or {}).get("cpus") or 0),
        model=deployed,
    )
    return profile


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


def _prepare_job(
    job: Path,
    artifact: Path,
    settings: dict[str, Any],
    samples: Samples,
    inputs: list[InputSpec],
    cfg: Any,
    profile: bool = True,
    baseline: Path | None = None,
) -> None:
    """The benchprog job for `artifact`, the compiled .ort: loaded as saved, profiled, its outputs
    kept. `profile` False: the outputs without the per-layer profile (and its probes), for a caller
    that never reads it (the compile's artifact check). `baseline`: the float model, timed after it in
    the same run, loaded at the compile's optimization level."""
    from backends.runners.benchprog import FORMAT_VERSION

    _place(artifact, job / "model.ort")
    measure.write_job_samples(job / "samples.npz", samples, inputs)
    from backends.onnxruntime._profile import probe_model

    if profile:
        (job / PROBE_FILE).write_bytes(probe_model())
        (job / PROBE_BASELINE_FILE).write_bytes(probe_model(1))
    options = load_options(settings)
    body: dict[str, Any] = {
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
    }
    if baseline is not None:
        name = f"baseline{baseline.suffix}"
        _place(baseline, job / name)
        body["baseline"] = {
            "model": name,
            "options": {"graph_optimization_level": _load_level(settings)},
            "budget_ms": measure.BASELINE_BUDGET_MS,
            "least": measure.BASELINE_LEAST,
        }
    if profile:
        body["profile"] = {
            **measure.profile_request(cfg),
            "probe": PROBE_FILE,
            "probe_baseline": PROBE_BASELINE_FILE,
        }
    write_request(job, body)


def load_options(settings: dict[str, Any]) -> dict[str, Any]:
    """benchprog's session options for the compiled .ort, from session.json: loaded as saved."""
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
    return options


def _place(source: Path, target: Path) -> None:
    """`source` in the job folder: a hard link where the file system allows it, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


PROBE_FILE = "profiler-probe.onnx"
"""The probe graph benchprog profiles beside the model to measure the profiler's own per-node cost."""
PROBE_BASELINE_FILE = "profiler-probe-baseline.onnx"
"""The one-node-per-chain probe: unprofiled beside the full one, it measures a run's fixed cost."""
