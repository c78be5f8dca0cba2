"""The shared half of every evaluate stage: the samples, the runner's outputs, the accuracy against the
float model, and the `measurements` record verify reads.

A backend's evaluate differs in what it compiles and which runtime benchprog loads; everything after the
runner returns is the same for all of them, so it lives here, owned by no vendor: the evaluation samples
(the spec's evaluate.data, or seeded random inputs), the task and its labels, the samples file a runner
reads, the profiled iterations, the scoring of the runner's outputs against the float reference, and the
measurement records with their evidence and details. The stage inputs every profile reads (the float
model, the placement record) are read here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends import tasks
from backends.passes.accuracy import AccuracyResult, ModelOutputs, Tally, iter_outputs
from backends.passes.data import InputSpec, Sample, SampleSet, random_samples, sample_set
from backends.runners import Runner
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

RANDOM_SAMPLES = 8
"""Samples drawn (seed 0) for fidelity when the spec gives no evaluation data."""

PROFILE_RUNS = 30
"""Profiled iterations at most (fewer when the spec times fewer): run after the timed ones. Each layer's
time is a middle mean over them, in whole microseconds: 30 kept PP-OCR's classifier and detector
within 15 % of the timed runs' CPU time on a busy 2-core host
(tests/e2e/test_profile_sums.py); what they add to evaluate's time: bench/profile.py."""

LATENCY_KEYS = ("p50", "p90", "p95", "p99", "mean")
"""The latency statistics every timed evaluate records, as `latency_ms.<key>`."""

Samples = list[Sample] | SampleSet
"""A list (random inputs) or a SampleSet (evaluate.data, read lazily on every pass)."""


def samples(request: StageRequest, inputs: list[InputSpec]) -> tuple[Samples, str]:
    """The evaluation samples and where they come from (for details): evaluate.data when the spec
    gives it, else RANDOM_SAMPLES seeded random inputs."""
    folder = request.inputs.get("eval_data")
    if folder is None:
        return random_samples(inputs, RANDOM_SAMPLES, seed=0), "random inputs (seed 0)"
    return sample_set(Path(folder), inputs, role="evaluate.data"), f"evaluate.data ({Path(folder).name})"


def task_and_labels(
    request: StageRequest, found: Samples, reference_model: Path
) -> tuple[tasks.TaskConfig | None, list[Any] | None]:
    """The declared task (resolved against the float model's graph) and each sample's label."""
    from backends.tasks.setup import task_and_labels as for_request

    names = found.names if isinstance(found, SampleSet) else [s.name for s in found]
    return for_request(request.config.get("evaluate"), request.inputs, reference_model, names)


PROFILE_BUDGET_MS, PROFILE_LEAST = 300.0, 10
"""The profiled runs of a model: as many as fit 300 ms at its timed p50, at least 10 (at most
`profile_runs`): a 17 ms detector is profiled 18 times, a 100 ms model 10 times, a millisecond model
PROFILE_RUNS times (bench_common.runs_within says why fewer runs of a slow model suffice)."""
BASELINE_BUDGET_MS, BASELINE_LEAST = 500.0, 10
"""The runs of the float model and of the int8 build timed in alternation with it: as many of each as
the int8 build's p50 fits in 500 ms, at least 10, at most the spec's runs. It is a ratio of two means
taken side by side, so the machine's drift cancels and ten pairs settle it for any model slower than
a few milliseconds (a fast model gets more, it costs little); at 2 s the pairs took three times the
spec's own timed runs on a 45 ms YOLOv8-seg (the float model is the slower one)."""


def profile_runs(cfg: Any) -> int:
    """The profiled iterations for an evaluate section: as many as the timed runs, within 3..PROFILE_RUNS."""
    return max(3, min(PROFILE_RUNS, int(cfg.get("runs", 100))))


def profile_request(cfg: Any) -> dict[str, Any]:
    """benchprog's `profile` field for an evaluate section: at most `profile_runs`, fewer for a slow
    model (PROFILE_BUDGET_MS)."""
    return {"runs": profile_runs(cfg), "budget_ms": PROFILE_BUDGET_MS, "least": PROFILE_LEAST}


def write_job_samples(path: Path, found: Samples, inputs: list[InputSpec]) -> None:
    """The runner's samples file, written one sample at a time."""
    from backends.runners.benchprog import write_samples

    write_samples(path, ([s.feed[spec.name] for spec in inputs] for s in found))


def score_job(
    job: Path,
    result: dict[str, Any],
    reference_model: Path,
    found: Samples,
    labels: list[Any] | None,
    task: tasks.TaskConfig | None,
    threads: int = 1,
) -> AccuracyResult:
    """Scores the runner's outputs against the float reference run here, one sample of each model in
    memory at a time, however large the evaluation set."""
    tally = Tally(output_names(result), task, labels, found)
    _, reference = iter_outputs(reference_model, found, threads)
    for ref, out in zip(reference, _runner_outputs(job, result, len(found)), strict=True):
        tally.add(ref, out)
    return tally.result()


def read_outputs(job: Path, result: dict[str, Any]) -> ModelOutputs:
    """All of the runner's outputs in memory (for a caller that must reshape them first)."""
    count = int((result.get("outputs") or {}).get("samples", 0))
    return ModelOutputs(output_names(result), list(_runner_outputs(job, result, count)))


def output_names(result: dict[str, Any]) -> list[str]:
    """The artifact's output names, in the order the runner wrote them."""
    return list((result.get("outputs") or {}).get("names", []))


def _runner_outputs(job: Path, result: dict[str, Any], expected: int) -> Iterator[list[np.ndarray]]:
    """The artifact's outputs as the runner wrote them, one sample at a time."""
    import numpy as np

    from backends.runners.benchprog import sample_key

    info = result.get("outputs") or {}
    names, count = output_names(result), int(info.get("samples", 0))
    if count != expected:
        raise TerminalError(f"the runner returned outputs for {count} samples, {expected} were sent")
    try:
        with np.load(job / str(info.get("file", "outputs.npz")), allow_pickle=False) as archive:
            for i in range(count):
                yield [np.asarray(archive[sample_key(i, k)]) for k in range(len(names))]
    except (OSError, KeyError, ValueError) as exc:
        raise TerminalError(f"the runner returned no readable outputs: {exc}") from exc


def float_model(request: StageRequest) -> Any:
    """The float model the rewrite rule dry-runs the rewrite library on (only with fallbacks to move)."""
    import onnx

    path = request.inputs.get("float_model")
    return onnx.load(str(path)) if path is not None and request.target.npu_cores > 0 else None


def placement(request: StageRequest) -> dict[str, Any]:
    """The placement record compile wrote (which node runs where, in which precision); {} without one."""
    path = request.inputs.get("placement")
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise TerminalError(f"cannot read {Path(path).name}: {exc}") from exc
    return data if isinstance(data, dict) else {}


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
    """The report's `measurements`, in the format verify reads: latency and memory with the runner's
    evidence, the artifact's size, the accuracy and the float model's reference accuracy."""
    lat, memory = result["latency_ms"], result["memory"]
    runtime = _runtime_detail(result, runner)
    timing = (
        f"{runtime}; {lat.get('runs')} runs after {lat.get('warmup')} warm-up, {result.get('timed_feed')}"
        f"{noise_text(lat)}"
    )
    out: dict[str, dict[str, Any]] = {}
    for key in LATENCY_KEYS:
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
