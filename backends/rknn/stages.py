"""The RKNN stages: quantize (plan + calibration bundle), compile (the real build), evaluate (simulator).

See build.py for why quantize and compile split RKNN's one build the way they do.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.passes.check import dump_json, quantization_config, summarize
from backends.rknn import account, driver, simulate
from backends.rknn import build as B
from backends.rknn.quant_plan import calibration_files, quant_plan
from backends.sdk import bundles, toolchains
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.sdk.host import host_isa, memory_layout
from backends.sdk.vocab import OP_TABLE


def _fingerprint() -> dict[str, str]:
    return {**toolchains.fingerprint(toolchains.RKNN), "worker": driver.worker_digest()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- quantize


class RknnQuantize:
    """Stage "quantize": resolves RKNN's quantization and writes model + plan + calibration as a bundle.
    It runs in this process (onnx, numpy); the toolkit version is in its key because the plan is
    written in that toolkit's vocabulary (quantized_dtype, quantized_algorithm)."""

    stage = "quantize"

    def fingerprint(self) -> dict[str, str]:
        from backends.passes.importer import dist_version

        return {
            "onnx": dist_version("onnx"),
            "numpy": dist_version("numpy"),
            "rknn-toolkit2": toolchains.fingerprint(toolchains.RKNN)["rknn-toolkit2"],
        }

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("quantize: no model input")
        model = onnx.load(str(source), load_external_data=False)
        model, forms = _convertible(model, Path(source), request)
        plan, notes = quant_plan(request.config, request.target, model)
        if forms:
            notes = [f"converter forms applied before rknn-toolkit2: {', '.join(forms)}", *notes]
        members: dict[str, bytes | Path] = {B.MODEL_FILE: Path(source)}
        if forms:
            members[B.MODEL_FILE] = model.SerializeToString()
        if plan["quantize"]:
            from backends.passes.quant.policy import calibration_folder

            folder = calibration_folder(request.inputs)
            meta = B.read_meta(model)
            stage_dir = request.workdir / "bundle"
            lines = calibration_files(
                folder, Path(source), meta, plan["samples"], plan["seed"], stage_dir / "calib"
            )
            for path in sorted((stage_dir / "calib").glob("*.npy")):
                members[f"calib/{path.name}"] = path
            members[B.DATASET_FILE] = ("\n".join(lines) + "\n").encode()
        members[B.QUANT_FILE] = (json.dumps(plan, indent=1, sort_keys=True) + "\n").encode()
        out = bundles.write(request.workdir / "model.rknnq.tar", members)
        request.log.parent.mkdir(parents=True, exist_ok=True)
        request.log.write_text(json.dumps({"plan": plan, "notes": notes}, indent=1, sort_keys=True) + "\n")
        note = (
            f"rknn plan: {B.dtype_label(plan.get('quantized_dtype'), B.carries_qdq(model.graph))}; the build runs in compile"
            + (
                f" ({len(plan['sensitive_nodes'])} sensitive layers hybrid)"
                if plan.get("sensitive_nodes")
                else ""
            )
            + (
                f"; {len(plan['tail_hybrid']['nodes'])} tail nodes asked float16"
                if plan.get("tail_hybrid")
                else ""
            )
            + (f"; {plan['auto_mapping']}" if plan.get("auto_mapping") else "")
        )
        return StageOutput(
            artifacts={"model": out}, report={"rknn_quantization": plan, "notes": notes}, note=note
        )


RKNN_FORMS = ("unbounded_clamp",)
"""The converter forms (backends.passes.rewrite.rules.convertible) rknn-toolkit2 needs: its quantizer
reads a `Max(x, -inf)` bound as a range and fails on the NaN it makes. The toolkit takes the others
(SAME pads, run-time shapes, allowzero) as exported, so the model it gets keeps their node names."""


def _convertible(model: Any, source: Path, request: StageRequest) -> tuple[Any, list[str]]:
    """`model` with RKNN_FORMS applied where they match (weights read for that only); the notes."""
    from backends.passes.rewrite.converter_forms import convertible, disabled
    from backends.sdk.base import StageLog

    if not any(node.op_type in ("Max", "Min") for node in model.graph.node):
        return model, []
    import onnx

    full = onnx.load(str(source))
    converted, forms = convertible(
        full, StageLog(request.log), only=RKNN_FORMS, skip=disabled(request.config)
    )
    return (converted, forms) if forms else (model, [])


# ---------------------------------------------------------------- compile


def sidecar(
    prep: B.Prepared,
    target: Any,
    compile_cfg: Mapping[str, Any],
    req: Mapping[str, Any],
    result: Mapping[str, Any],
) -> dict[str, Any]:
    """model.rknn.json: what an on-device run needs (core mask, input contract) and how it was built."""
    meta = prep.meta or {}
    return {
        "format_version": 1,
        "target": target.id,
        "target_platform": req["config"]["target_platform"],
        "core_mask": B.core_mask(target, compile_cfg.get("cores")),
        "input": {
            "name": meta.get("input"),
            "layout": meta.get("layout", "nchw"),
            "dtype": meta.get("dtype", "float32"),
            "mean_values": meta.get("mean_values"),
            "std_values": meta.get("std_values"),
        }
        if meta
        else None,
        "quantized": B.integer_build(req),
        "quantized_dtype": req["config"].get("quantized_dtype"),
        "own_qdq": req["own_qdq"],
        "hybrid_layers": result.get("hybrid_layers", []),
        "rknn_sha256": result["rknn"]["sha256"],
        "toolkit": result.get("sdk"),
        "build_request": dict(req),
    }


class RknnCompile:
    """Stage "compile": the real rknn-toolkit2 build in the managed venv; exports the .rknn."""

    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        """Besides the pinned versions: the whole venv, the host's vector ISA and its memory layout.
        Three machines with the same pinned versions built three .rknn files under one key, each
        reproducibly. The bytes that differ are host pointers the toolkit writes into the file
        (8-byte words 0x00007fff........ and 0x00005555........; 1,000 bytes of 6.9 MB for PP-OCR
        rec), and its worker runs with address randomization off, so they are fixed by the kernel and
        the CPUs the worker may use: pinned to one CPU, this machine built a third file. So the
        layout is keyed (backends.sdk.host.memory_layout) and no lock built on one is claimed for
        another. All of these, and the venv's unpinned dependencies as this machine's installer
        resolved them, are host_* facts: another machine's build of the same spec, which the engine
        keeps from the lock rather than rebuild (reconciler.engine.resolve)."""
        return {
            **_fingerprint(),
            "host_environment": toolchains.environment(toolchains.RKNN),
            "host_isa": host_isa(),
            **{f"host_{k}": v for k, v in memory_layout().items()},
        }

    def run(self, request: StageRequest) -> StageOutput:
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("compile: no model input")
        compile_cfg: Mapping[str, Any] = request.config.get("compile") or {}
        B.core_mask(request.target, compile_cfg.get("cores"))  # fail before building on an impossible mask
        with driver.job_folder() as job:
            prep = B.prepare(Path(source), job)
            req = B.build_request(prep, request.target, compile_cfg)
            integer = B.integer_build(
                req
            )  # its own calibration or the model's Q/DQ: checked on the simulator
            plan = simulate.CheckPlan.make(request, prep, job.parent / "sim") if integer else None
            result = driver.run(req, prep.folder, request.log, plan.after if plan else None)
            checked = plan.check(request, prep) if plan else None  # the int8 build against its source
            rknn_path = request.workdir / "model.rknn"
            shutil.copyfile(prep.folder / req["output"], rknn_path)
            told = account.read(
                request.log, prep.onnx, request.target, quantization_config(request.config), result.get("sdk")
            )
        meta = sidecar(prep, request.target, compile_cfg, req, result)
        meta_path = request.workdir / "model.rknn.json"
        meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        report = {
            "rknn": result["rknn"],
            "target_platform": req["config"]["target_platform"],
            "core_mask": meta["core_mask"],
            "quantized_dtype": B.dtype_label(req["config"].get("quantized_dtype"), req["own_qdq"]),
            "hybrid_layers": meta["hybrid_layers"],
            "toolkit": result.get("sdk"),
            "fusion": "rewrite.fusion is applied by the shared rewrite pass; RKNN fuses by optimization_level",
        }
        if checked is not None:
            report["check"] = checked
        dtype = B.dtype_label(req["config"].get("quantized_dtype"), req["own_qdq"])
        note = f"{req['config']['target_platform']} .rknn ({dtype}), {result['rknn']['size']} bytes"
        disabled = result.get("disabled_rules")
        if disabled:
            report["disabled_rules"] = disabled
            note += f"; built with the toolkit's rule(s) {', '.join(disabled)} disabled, as it suggested after one failed"
        tail = result.get("tail_hybrid")
        if tail is not None:
            report["tail_hybrid"] = tail
            note += (
                f"; decode tail float16 ({tail['nodes']} nodes)"
                if tail["kept"]
                else f"; decode tail left int8: the toolkit named none of its anchors ({tail['why']})"
            )
        artifacts = {"rknn": rknn_path, "rknn_meta": meta_path}
        if told is None:
            report["placement"] = {"source": f"{OP_TABLE}: the build log holds no layer table"}
        else:
            artifacts["tool_placement"] = request.workdir / "placement.json"
            artifacts["tool_placement"].write_text(dump_json(told.placement))
            report["placement"] = summarize(told.placement)
            report["measurements"] = told.measurements
            note += f"; {told.note}"
        return StageOutput(artifacts=artifacts, report=report, note=note)


# ---------------------------------------------------------------- evaluate


def _task_and_labels(request: StageRequest, evaluate: Mapping[str, Any], names: list[str]) -> tuple[Any, Any]:
    from backends.tasks.setup import task_and_labels

    return task_and_labels(evaluate, request.inputs, Path(request.inputs["float_model"]), names)


class RknnEvaluate:
    """Stage "evaluate". Runner local: accuracy on the RKNN simulator against the float ONNX (evidence
    "measured:host simulator"), a per-layer accuracy summary, and the artifact size; the simulator gives
    no timing (eval_perf needs a board), so latency stays the placement estimate. Runner ssh/adb: the
    .rknn on the board (rknn-toolkit-lite2) with the recorded core mask, latency and accuracy
    `measured:device`."""

    stage = "evaluate"

    def fingerprint(self) -> dict[str, str]:
        return _fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        evaluate: Mapping[str, Any] = request.config.get("evaluate") or {}
        runner = str(evaluate.get("runner", "local"))
        rknn_meta = json.loads(Path(request.inputs["rknn_meta"]).read_text())
        if runner != "local":
            return self._device(request, rknn_meta, evaluate)
        with driver.job_folder() as job:
            return self._run(request, rknn_meta, job, evaluate)

    def _device(
        self, request: StageRequest, rknn_meta: dict[str, Any], evaluate: Mapping[str, Any]
    ) -> StageOutput:
        """On the board through a runner: benchprog's rknnlite runtime with the recorded core mask, fed
        what the application feeds (the raw frame, NHWC), scored against the float ONNX here."""
        import numpy as np

        from backends.passes import accuracy, data
        from backends.runners import runner_for, write_request
        from backends.runners.benchprog import FORMAT_VERSION, sample_key
        from backends.sdk.measure import measurements, read_outputs

        runner = runner_for(str(evaluate["runner"]))
        with tempfile.TemporaryDirectory(prefix="npuctl-rknn-device-") as tmp:
            job = Path(tmp)
            prep = B.prepare(Path(request.inputs["model"]), job / "bundle")
            raw = B.raw_inputs(data.model_inputs(prep.onnx), prep.meta)
            folder = request.inputs.get("eval_data")
            if folder is not None:
                samples = data.load_samples(
                    Path(folder), raw, None, 0, "evaluate.data", B.color_of(prep.meta)
                )
                source = f"evaluate.data ({Path(folder).name})"
            else:
                samples, source = data.random_samples(raw, 8, seed=0), "random inputs (seed 0)"
            shutil.copyfile(request.inputs["rknn"], job / "model.rknn")
            arrays: dict[str, Any] = {
                sample_key(i, j): s.feed[spec.name]
                for i, s in enumerate(samples)
                for j, spec in enumerate(raw)
            }
            with (job / "samples.npz").open("wb") as fh:
                np.savez(fh, **arrays)
            reference = accuracy.run_model(
                Path(request.inputs["float_model"]),
                [
                    {spec.name: B.normalized(s.feed[spec.name], spec.name, prep.meta) for spec in raw}
                    for s in samples
                ],
            )
            formats = [
                "nhwc"
                if prep.meta and spec.name == prep.meta["input"] and prep.meta["layout"] == "nhwc"
                else "nchw"
                for spec in raw
            ]
            inputs = [
                {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype, "data_format": fmt}
                for spec, fmt in zip(raw, formats, strict=True)
            ]
            write_request(
                job,
                {
                    "format_version": FORMAT_VERSION,
                    "runtime": "rknnlite",
                    "model": "model.rknn",
                    "options": {
                        "core_mask": rknn_meta["core_mask"]["value"],
                        "inputs": inputs,
                        "output_names": reference.names,
                    },
                    "warmup": int(evaluate.get("warmup", 10)),
                    "runs": int(evaluate.get("runs", 100)),
                    "seed": 0,
                    "samples": "samples.npz",
                    "sample_inputs": [spec.name for spec in raw],
                    "outputs": "outputs.npz",
                },
            )
            shutil.rmtree(job / "bundle")
            result = runner.run(job, float(evaluate.get("timeout_s", 600)), request.log)
            got = read_outputs(job, result)
            got.values = [
                [np.asarray(v, dtype=np.float32).reshape(r.shape) for v, r in zip(vals, ref, strict=True)]
                for vals, ref in zip(got.values, reference.values, strict=True)
            ]
            got.names = reference.names
            task, labels = _task_and_labels(request, evaluate, [s.name for s in samples])
            scored = accuracy.score(got, reference, labels, task, samples)
            found = measurements(result, runner, scored, Path(request.inputs["rknn"]), source)
        report = {
            "measurements": found,
            "runner": runner.describe(),
            "core_mask": rknn_meta["core_mask"],
            "latency_ms": {k: v for k, v in result["latency_ms"].items() if k != "samples"},
            "accuracy": scored.as_dict(),
        }
        lat = result["latency_ms"]
        note = f"{runner.describe()} ({rknn_meta['core_mask']['name']}): p50 {lat['p50']:.3f} ms, {scored.note()}"
        return StageOutput(report=report, note=note)

    def _run(
        self, request: StageRequest, rknn_meta: dict[str, Any], job: Path, evaluate: Mapping[str, Any]
    ) -> StageOutput:

        from backends.passes import accuracy, data

        prep = B.prepare(Path(request.inputs["model"]), job)
        req = dict(rknn_meta["build_request"])
        specs = data.model_inputs(prep.onnx)
        raw = B.raw_inputs(specs, prep.meta)
        folder = request.inputs.get("eval_data")
        if folder is None:
            from backends.rknn import EVALUATE_DATA

            raise TerminalError(f"rknn {EVALUATE_DATA.message}")
        samples = data.load_samples(Path(folder), raw, None, 0, "evaluate.data", B.color_of(prep.meta))
        sim = job.parent / "sim"  # outside the build folder: its contents change the toolkit's bytes
        after: dict[str, Any] = {"simulate": simulate.request(samples, raw, prep.meta, sim)}
        if len(raw) == 1 and not req.get("own_qdq"):  # the toolkit analyses a QAT model on a board only
            after["analysis"] = {
                "inputs": [str(sim / "analysis_0.npy")],
                "dir": str(job.parent / "snapshot"),
                "summary": str(sim / "analysis.json"),
            }
        result = driver.run(req, prep.folder, request.log, after)
        reference = simulate.reference(Path(request.inputs["float_model"]), samples, raw, prep.meta)
        outputs = simulate.outputs(sim, reference, len(samples))
        task, labels = _task_and_labels(request, evaluate, [s.name for s in samples])
        scored = accuracy.score(outputs, reference, labels, task, samples)
        analysis = None
        if result.get("analysis"):
            analysis = json.loads((sim / "analysis.json").read_text())
        rknn_path = Path(request.inputs["rknn"])
        verified = result["rknn"]["sha256"] == _sha256(rknn_path)
        detail = (
            f"rknn-toolkit2 {result.get('sdk')} simulator ({rknn_meta['target_platform']}), {scored.samples} samples, "
            f"{scored.task}: {scored.text}; cosine {scored.fidelity.cosine:.5f}"
            + ("" if verified else "; simulated build differs in bytes from the compiled artifact")
        )
        measurements = {
            "accuracy": {
                "value": scored.accuracy,
                "measure": f"{scored.task} {scored.metric}",
                "evidence": "measured:host simulator",
                "detail": detail,
            },
            "accuracy.reference": {
                "value": scored.reference,
                "evidence": "measured:host",
                "detail": "float ONNX on ONNX Runtime CPU, same samples",
            },
            "size_mb": {
                "value": round(rknn_path.stat().st_size / 1e6, 6),
                "evidence": "measured:host",
                "detail": ".rknn file bytes",
            },
        }
        report = {
            "measurements": measurements,
            "accuracy": scored.as_dict(),
            "simulator": {"artifact_reproduced": verified, "sdk": result.get("sdk")},
            "accuracy_analysis": analysis,
            "runner": "local (rknn-toolkit2 simulator)",
        }
        note = f"simulator {scored.note()} (float {scored.reference:.4f})"
        artifacts = {}
        from backends.rknn.profile import estimated_profile

        profile = estimated_profile(request)
        if profile is not None:
            from backends import profiles

            artifacts["profile"] = profiles.write(profile, request.workdir / "profile.json")
            report["profile"] = profiles.summary(profile)
        return StageOutput(artifacts=artifacts, report=report, note=note)
