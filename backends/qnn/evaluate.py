"""Stage "evaluate" on the HTP simulator: the EPContext model's accuracy against the float ONNX
(`measured:host simulator`) and its emulated cycles, recorded but never turned into a latency (on x86
they follow the host's time), with the op that takes most of them flagged."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.qnn import driver, fingerprint, timing
from backends.qnn.profile import qnn_profile, read_profile
from backends.qnn.stages import _read_outputs, _write_samples, context_files, soc
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError


class QnnEvaluate:
    """The EPContext model on the HTP simulator: accuracy against the float ONNX (`measured:host
    simulator`) and its simulated cycles (`estimated`: simulator cycles, not device time)."""

    stage = "evaluate"

    def fingerprint(self) -> dict[str, str]:
        return {**fingerprint(), "htp_clocks": _htp_clocks()}

    def run(self, request: StageRequest) -> StageOutput:
        from backends.passes import accuracy, data

        evaluate: Mapping[str, Any] = request.config.get("evaluate") or {}
        runner = str(evaluate.get("runner", "local"))
        if runner != "local":
            raise TerminalError(f"qnn evaluate: runner {runner!r}: on-device QNN runs are not supported yet")
        ctx, binary = request.inputs.get("context_model"), request.inputs.get("context_binary")
        if ctx is None or binary is None:
            raise TerminalError("qnn evaluate needs compile's context_model and context_binary")
        chip = soc(request.target, request.config)
        specs = data.model_inputs(Path(request.inputs["model"]))
        folder = request.inputs.get("eval_data")
        if folder is not None:
            samples = data.load_samples(Path(folder), specs, None, 0, "evaluate.data")
            data_source = f"evaluate.data ({Path(folder).name})"
        else:
            samples, data_source = data.random_samples(specs, 4, seed=0), "random inputs (seed 0)"
        with tempfile.TemporaryDirectory(prefix="npuctl-qnn-eval-") as tmp:
            job = Path(tmp)
            name = context_files(Path(ctx))[0]
            shutil.copyfile(ctx, job / "model_ctx.onnx")
            shutil.copyfile(binary, job / name)
            _write_samples(job / "samples.npz", [[s.feed[spec.name] for spec in specs] for s in samples])
            run_request = {
                "mode": "run",
                "model": "model_ctx.onnx",
                "samples": "samples.npz",
                "count": len(samples),
                "inputs": [spec.name for spec in specs],
                "outputs": "outputs.npz",
                "profile": str(job / "profile.csv"),
                **chip,
            }
            answer = driver.call(run_request, job, job / "native.log")
            sim = f"QNN HTP simulator (onnxruntime-qnn {answer.get('onnxruntime_qnn')}, htp_arch v{chip['htp_arch']})"
            reference = accuracy.run_model(
                Path(request.inputs["float_model"]), [dict(s.feed) for s in samples]
            )
            outputs = _read_outputs(job / "outputs.npz", len(samples), reference)
            cycles = read_profile(job / "profile.csv") if (job / "profile.csv").is_file() else {}
            profile = qnn_profile(cycles, request, sim) if cycles else None
        from backends.tasks.setup import task_and_labels

        task, labels = task_and_labels(
            evaluate, request.inputs, Path(request.inputs["float_model"]), [s.name for s in samples]
        )
        scored = accuracy.score(outputs, reference, labels, task, samples)
        found: dict[str, dict[str, Any]] = {
            "accuracy": {
                "value": scored.accuracy,
                "measure": f"{scored.task} {scored.metric}",
                "evidence": "measured:host simulator",
                "detail": f"{sim}, {scored.samples} samples of {data_source}, {scored.task}: {scored.text}; "
                f"cosine {scored.fidelity.cosine:.5f}",
            },
            "accuracy.reference": {
                "value": scored.reference,
                "evidence": "measured:host",
                "detail": "float ONNX on ONNX Runtime CPU, same samples",
            },
            "size_mb": {
                "value": round((Path(ctx).stat().st_size + Path(binary).stat().st_size) / 1e6, 6),
                "evidence": "measured:host",
                "detail": "EPContext model + context binary bytes",
            },
        }
        if cycles.get("total") is not None:
            found["htp_cycles"] = {
                "value": int(cycles["total"]),
                "evidence": "estimated: QNN HTP simulator cycles",
                "detail": f"{sim}: simulated accelerator cycles per inference (last sample), not device time: "
                f"{EMULATION}",
            }
        report = {
            "measurements": found,
            "accuracy": scored.as_dict(),
            "simulator": {"runtime": sim, "cycles_per_op": cycles.get("per_op", {})},
            "runner": "local (QNN HTP simulator)",
            "data": {"source": data_source, "samples": len(samples)},
        }
        note = f"HTP simulator {scored.note()} (float {scored.reference:.4f})"
        if cycles.get("total") is not None:
            note += f", {cycles['total']} emulated cycles (no latency judged on them)"
        dominant = dominant_op(cycles)
        if dominant is not None:
            report["dominant_op"] = dominant
            note += f"; {dominant['op']} takes {dominant['share']:.0%} of the emulated cycles"
        artifacts = {}
        if profile is not None:
            from backends import profiles

            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        return StageOutput(artifacts=artifacts, report=report, note=note)


EMULATION = (
    "on x86 the HTP is emulated and its cycle count follows the host's time (the same binary and input "
    "gave counts in proportion to host wall time), so no latency SLO is judged on it: latency stays the "
    "check stage's roofline estimate"
)
DOMINANT_SHARE = 0.5


def dominant_op(cycles: Mapping[str, Any]) -> dict[str, Any] | None:
    """The op taking most (over half) of a run's emulated cycles, flagged: a profile where one op
    dominates says more about the emulation than about the model."""
    per_op: Mapping[str, Any] = cycles.get("per_op") or {}
    total = sum(float(v) for v in per_op.values())
    if not per_op or total <= 0:
        return None
    op, value = max(per_op.items(), key=lambda kv: (float(kv[1]), kv[0]))
    share = float(value) / total
    return {"op": op, "cycles": int(value), "share": round(share, 6)} if share > DOMINANT_SHARE else None


def _htp_clocks() -> str:
    """The catalog's HTP clocks (they turn cycles into the latency estimate, so they key evaluate)."""
    from backends.catalog import targets

    clocks = {t.id: timing.htp_clock_mhz(t) for t in targets().values() if t.backend == "qnn"}
    return ",".join(f"{k}={v:g}" for k, v in sorted(clocks.items()) if v is not None)
