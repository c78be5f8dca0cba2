"""OpenVINO evaluate: the saved IR measured through a runner (benchprog's "openvino" runtime), scored
against the float ONNX by the one accuracy implementation.

Where it ran is part of the evidence: on an Intel NPU (present locally, or on a device reached through
ssh/adb) the numbers are `measured:device`; without one they come from OpenVINO's CPU plugin and are
`measured:host`, with the detail saying the target NPU was not present.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from backends import profiles
from backends.openvino import fingerprint
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.evidence import about_host, cpu_name


def _settings(request: StageRequest) -> tuple[Path, Path, dict[str, Any]]:
    xml, binary, cfg = (request.inputs.get(k) for k in ("openvino_xml", "openvino_bin", "openvino_config"))
    if xml is None or binary is None or cfg is None:
        raise TerminalError(
            "evaluate needs openvino's compile artifacts (openvino_xml, openvino_bin, openvino_config)"
        )
    return Path(xml), Path(binary), json.loads(Path(cfg).read_text())


def prepare_job(
    job: Path,
    xml: Path,
    binary: Path,
    settings: dict[str, Any],
    samples: Any,
    inputs: list[Any],
    cfg: dict[str, Any],
) -> None:
    from backends.runners import write_request
    from backends.runners.benchprog import FORMAT_VERSION
    from backends.sdk.measure import profile_request, write_job_samples

    shutil.copyfile(xml, job / "model.xml")
    shutil.copyfile(binary, job / "model.bin")
    write_job_samples(job / "samples.npz", samples, inputs)
    write_request(
        job,
        {
            "format_version": FORMAT_VERSION,
            "runtime": "openvino",
            "model": "model.xml",
            "options": {"device": settings["device"], "properties": settings["properties"]},
            "warmup": int(cfg.get("warmup", 10)),
            "runs": int(cfg.get("runs", 100)),
            "seed": 0,
            "samples": "samples.npz",
            "sample_inputs": [spec.name for spec in inputs],
            "outputs": "outputs.npz",
            "profile": profile_request(cfg),
        },
    )


def evidence_for(runner: Any, device: str, target_device: str, precision: str) -> tuple[str, str]:
    """(evidence, what ran): device evidence only when the plugin that ran is the target's own device
    (its NPU, here or on a board reached through the runner); the CPU plugin, wherever it runs, is
    evidence about that CPU (backends.sdk.evidence)."""
    where = "this host" if runner.describe() == "local" else runner.describe()
    ran = f"OpenVINO {device} plugin, {precision}, on {where}"
    if device == target_device:
        return "measured:device", ran
    return "measured:host", f"{ran}; target {target_device} not used"


class OpenVinoEvaluate:
    stage = "evaluate"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        from backends.passes.data import model_inputs
        from backends.runners import runner_for
        from backends.sdk import measure
        from backends.sdk.measure import measurements, score_job, task_and_labels

        cfg = dict(request.config.get("evaluate") or {})
        runner = runner_for(str(cfg.get("runner", "local")))
        xml, binary, settings = _settings(request)
        model, reference_model = request.inputs.get("model"), request.inputs.get("float_model")
        if model is None or reference_model is None:
            raise TerminalError("evaluate needs the model and the float reference (model, float_model)")
        inputs = model_inputs(Path(model))
        samples, data_source = measure.samples(request, inputs)
        task, labels = task_and_labels(request, samples, Path(reference_model))
        with tempfile.TemporaryDirectory(prefix="npuctl-ov-eval-") as tmp:
            job = Path(tmp)
            prepare_job(job, xml, binary, settings, samples, inputs, cfg)
            result = runner.run(job, float(cfg.get("timeout_s", 600)), request.log)
            accuracy = score_job(job, result, Path(reference_model), samples, labels, task)
        precision = settings["properties"].get("INFERENCE_PRECISION_HINT", "?")
        evidence, ran = evidence_for(
            runner, settings["device"], settings.get("target_device", "NPU"), precision
        )
        found = measurements(result, runner, accuracy, xml, data_source)
        for key, value in found.items():
            if value["evidence"] == runner.evidence and key != "accuracy.reference":
                value["evidence"] = evidence
                value["detail"] = f"{ran}; " + value["detail"]
        if evidence != "measured:device":
            about_host(
                found,
                request.target,
                f"OpenVINO {settings['device']} plugin on {cpu_name(result)} via {runner.describe()}",
            )
        found["size_mb"] = {
            "value": round((xml.stat().st_size + binary.stat().st_size) / 1e6, 6),
            "evidence": "measured:host",
            "detail": "OpenVINO IR bytes (model.xml + model.bin)",
        }
        report = {
            "measurements": found,
            "runner": runner.describe(),
            "device": settings["device"],
            "ran_on": ran,
            "properties": settings["properties"],
            "runtime": {k: result.get(k) for k in ("runtime", "runtime_version", "providers", "threads")},
            "host": result.get("device"),
            "latency_ms": result["latency_ms"],  # with the raw samples: the report draws their distribution
            "memory": result["memory"],
            "accuracy": accuracy.as_dict(),
            "data": {"source": data_source, "samples": len(samples)},
        }
        lat = result["latency_ms"]
        note = f"{ran}: p50 {lat['p50']:.3f} ms, p90 {lat['p90']:.3f} ms, {accuracy.note()}"
        artifacts = {}
        profile = record_profile(request, result, Path(model), settings["device"], evidence)
        if profile is not None:
            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        return StageOutput(artifacts=artifacts, report=report, note=note)


def record_profile(
    request: StageRequest, result: dict[str, Any], model: Path, device: str, evidence: str
) -> dict[str, Any] | None:
    """OpenVINO's PERF_COUNT layers mapped onto the deployed model, costed, attributed, with suggestions."""
    import onnx

    from backends.openvino.profile import runtime_layers
    from backends.profiles.suggest import suggest
    from backends.sdk.measure import float_model, placement

    trace = result.get("profile") or {}
    if not trace.get("available"):
        return None
    deployed = onnx.load(str(model), load_external_data=False)
    layers = runtime_layers(trace, deployed, device)
    placed = placement(request)
    profiles.with_costs(layers, deployed, placed)
    profile = profiles.build(
        runtime=f"{result.get('runtime')} {result.get('runtime_version')} {device} plugin",
        evidence=evidence,
        how=str(trace.get("how")),
        layers=layers,
        runs=list(trace.get("runs") or []),
        timed_p50_ms=float(result["latency_ms"]["p50"]),
        target=request.target,
        device_evidence=f"{evidence}: the layer type and kernel OpenVINO reports (PERF_COUNT)",
    )
    profile["suggestions"] = suggest(
        profile,
        request.target,
        float_model=float_model(request),
        precision=placed.get("precision") or {},
        model=deployed,
    )
    return profile
