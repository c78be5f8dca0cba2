"""Core ML stages (see backends.coreml): the recorded quantization plan, the conversion, and the honest
evaluate that says Core ML cannot run here."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.coreml import program
from backends.passes.quantized import quantized
from backends.passes.rewrite.converter_forms import disabled, write_convertible
from backends.sdk import bundles, toolchains
from backends.sdk.base import StageLog, StageOutput, StageRequest
from backends.sdk.errors import TerminalError, ToolchainMissing
from backends.sdk.worker import base_env, run_worker

WORKER = Path(__file__).with_name("worker.py")
TIMEOUT_S = 1800.0
TORCH_COSINE = 0.999
TORCH_ATOL = 1e-4
"""The traced PyTorch model (what coremltools converts) against the ONNX model on ONNX Runtime: cosine
>= TORCH_COSINE, or every output within TORCH_ATOL x max(1, |reference|)."""
NATIVE_FORMS = ("unrolled_lstm", "squeeze_as_reshape")
"""Converter forms left out on this route: the LSTM converter worker.py registers (lstm.py) reaches
the LSTMs inside an If's branches too, which a graph-level form does not (GRUs are unrolled here);
onnx2torch reads Squeeze and Unsqueeze in the ONNX layout, as they are."""


def fingerprint() -> dict[str, str]:
    digest = hashlib.sha256(WORKER.read_bytes()).hexdigest()[:16]
    return {**toolchains.fingerprint(toolchains.COREML), "coreml_worker": digest}


def plan(config: Mapping[str, Any]) -> dict[str, str]:
    """What compile builds for quantization.mode (ptq: W8 with fp16 activations)."""
    section: Mapping[str, Any] = config.get("quantization") or {}
    mode = str(section.get("mode") or config.get("quantization.mode") or "none")
    if mode == "qat":
        raise TerminalError("quantization.mode qat: onnx2torch cannot read Q/DQ models for Core ML")
    activations = str(section.get("activations") or "")
    if mode == "ptq" and activations.startswith(("int8", "uint8")):
        raise TerminalError(
            f"quantization.activations {activations}: W8A8 needs Core ML's activation calibration "
            "(linear_quantize_activations runs the model), which exists only on macOS; omit activations "
            "for int8 weights with fp16 activations"
        )
    return {"mode": mode, "weights": "int8" if mode == "ptq" else "float", "activations": "fp16"}


class CoreMlQuantize:
    """Stage "quantize": the float model passes on unchanged; the report records compile's plan."""

    stage = "quantize"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        chosen = plan(request.config)
        out = request.workdir / "model.onnx"
        shutil.copyfile(request.inputs["model"], out)
        note = f"Core ML plan: {chosen['weights']} weights, {chosen['activations']} activations (built at compile)"
        return StageOutput(artifacts={"model": out}, report={"plan": chosen}, note=note)


def _venv() -> Path:
    py = toolchains.python(toolchains.COREML)
    if py is None:
        raise ToolchainMissing(f"coremltools not installed: {toolchains.COREML.install_hint}")
    return py


def _agree(got: Any, want: Any) -> dict[str, float]:
    import numpy as np

    a, b = np.ravel(got).astype(np.float64), np.ravel(want).astype(np.float64)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return {
        "cosine": float(a @ b / denom) if denom else float(np.allclose(a, b)),
        "max_abs_diff": float(np.max(np.abs(a - b))) if a.size else 0.0,
        "max_abs_reference": float(np.max(np.abs(b))) if b.size else 0.0,
    }


ONNX2TORCH_OPSET = 17
"""The newest opset whose op versions onnx2torch converts (Reshape up to 14, Resize up to 13: none at 18
or 19)."""


def within_onnx2torch_opset(path: Path) -> int | None:
    """The model at `path` rewritten at ONNX2TORCH_OPSET when its opset is newer (ONNX's version
    converter: from 18 or 19 it changes no float op's meaning, only the types some accept and where
    Split and Reduce take their sizes and axes); the opset it had,
    or None when it was within or the converter has no adapter (onnx2torch then names the op). The
    traced model is checked against the ONNX source after, as always."""
    import onnx

    from backends.passes.importer import default_opset

    model = onnx.load(str(path))
    had = default_opset(model) or 0
    if had <= ONNX2TORCH_OPSET:
        return None
    try:
        lowered = onnx.version_converter.convert_version(model, ONNX2TORCH_OPSET)
    except Exception:  # noqa: BLE001 - the converter raises bare RuntimeErrors for a missing adapter
        return None
    onnx.save(lowered, str(path))
    return had


def without_passthrough_outputs(path: Path) -> dict[str, str]:
    """Rewrites `path` without the graph outputs that return a graph input unchanged (through Identity
    nodes only: an encoder that hands its padding mask on to its decoder); {output: input} of those
    dropped. A Core ML program cannot return an input as an output ("Main block's input name ... is
    different from its corresponding var's name"); the app already holds that tensor."""
    import onnx

    model = onnx.load(str(path))
    inputs = {v.name for v in model.graph.input}
    producer = {o: n for n in model.graph.node for o in n.output}
    found: dict[str, str] = {}
    for output in model.graph.output:
        name = output.name
        while name in producer and producer[name].op_type == "Identity":
            name = producer[name].input[0]
        if name in inputs:
            found[output.name] = name
    if found and len(found) < len(model.graph.output):
        kept = [o for o in model.graph.output if o.name not in found]
        del model.graph.output[:]
        model.graph.output.extend(kept)
        onnx.save(model, str(path))
        return found
    return {}


def constants_as_initializers(source: Path, dest: Path) -> int:
    """Writes `source` with its Constant nodes (tensor `value`) turned into initializers: onnx2torch
    reads Conv/Gemm weights only from initializers. The function is unchanged. Returns how many moved."""
    import onnx

    model = onnx.load(str(source))
    moved = 0
    for node in list(model.graph.node):
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type != "Constant" or value is None or len(node.attribute) != 1:
            continue
        tensor = onnx.TensorProto()
        tensor.CopyFrom(value.t)
        tensor.name = node.output[0]
        model.graph.initializer.append(tensor)
        model.graph.node.remove(node)
        moved += 1
    onnx.save(model, str(dest))
    return moved


class CoreMlCompile:
    """Stage "compile": the .mlpackage for apple-ane, packed as model.mlpackage.tar."""

    stage = "compile"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        import numpy as np

        from backends.passes import accuracy, data

        source = Path(request.inputs["model"])
        chosen = plan(request.config)
        options: Mapping[str, Any] = (request.config.get("compile") or {}).get("options") or {}
        precision = str(options.get("compute_precision") or "FLOAT16")
        specs = data.model_inputs(source)
        sample = data.random_samples(specs, 1, seed=0)[0]
        import onnx

        graph = onnx.load(str(source), load_external_data=False).graph
        arrived = quantized(n.op_type for n in graph.node)
        if arrived is not None:
            raise TerminalError(
                f"the model arrives quantized ({arrived.text()}), and Core ML's conversion (through "
                f"onnx2torch) reads no Q/DQ or integer operators; give {request.target.id} the float model"
            )
        outputs = [o.name for o in graph.output]
        with tempfile.TemporaryDirectory(prefix="npuctl-coreml-") as tmp:
            job = Path(tmp)
            with (job / "sample.npz").open("wb") as fh:
                arrays: dict[str, Any] = {f"i{k}": sample.feed[s.name] for k, s in enumerate(specs)}
                np.savez(fh, **arrays)
            moved = constants_as_initializers(source, job / "model.onnx")
            passthrough = without_passthrough_outputs(job / "model.onnx")
            converted = [name for name in outputs if name not in passthrough]
            forms = write_convertible(
                job / "model.onnx",
                job / "model.onnx",
                StageLog(Path(request.log)),
                skip=NATIVE_FORMS + disabled(request.config),
            )
            lowered = within_onnx2torch_opset(job / "model.onnx")
            if lowered is not None:
                forms.append(f"opset {lowered} -> {ONNX2TORCH_OPSET}")
            req = {
                "model": str(job / "model.onnx"),
                "sample": str(job / "sample.npz"),
                "torch_outputs": str(job / "torch.npz"),
                "inputs": [{"name": s.name, "shape": list(s.shape)} for s in specs],
                "outputs": converted,
                "compute_units": str(options.get("compute_units", "CPU_AND_NE")),
                "compute_precision": precision,
                "deployment_target": str(options.get("deployment_target", "iOS17")),
                "weights": chosen["weights"],
                "output": str(job / "model.mlpackage"),
                "description": f"npuctl: {request.target.id}",
            }
            result = run_worker(
                _venv(),
                WORKER,
                req,
                job,
                request.log,
                tool="coremltools",
                timeout_s=TIMEOUT_S,
                env=base_env(job),
            )
            reference = accuracy.run_model(source, [dict(sample.feed)])
            with np.load(job / "torch.npz") as traced:
                checks = {
                    name: _agree(traced[f"o{k}"], reference.values[0][reference.names.index(name)])
                    for k, name in enumerate(converted)
                }
            for name, check in checks.items():
                bound = TORCH_ATOL * max(1.0, check["max_abs_reference"])
                if check["cosine"] < TORCH_COSINE and check["max_abs_diff"] > bound:
                    raise TerminalError(
                        f"coreml compile: the traced PyTorch model disagrees with the ONNX model on output "
                        f"{name} (cosine {check['cosine']:.5f}, max |diff| {check['max_abs_diff']:.3g})"
                    )
            package = job / "model.mlpackage"
            if not (package / "Manifest.json").is_file():
                raise TerminalError("coremltools wrote no .mlpackage (Manifest.json missing)")
            members: dict[str, bytes | Path] = {
                str(p.relative_to(job)): p for p in sorted(package.rglob("*")) if p.is_file()
            }
            # compute units are chosen when the app loads the model (MLModel(compute_units=...)), not
            # stored in the package: the sidecar says which ones the spec asked for
            load: dict[str, Any] = {
                k: req[k] for k in ("compute_units", "compute_precision", "deployment_target")
            }
            load["inputs"] = result.get("package_inputs") or []
            if passthrough:
                load["inputs_returned_as_outputs"] = passthrough
            members["coreml.json"] = (json.dumps(load, indent=1, sort_keys=True) + "\n").encode()
            bundle = bundles.write(request.workdir / "model.mlpackage.tar", members)
        program_ops: dict[str, int] = dict(result.get("program_ops") or {})
        coverage = program.coverage(program_ops, request.target)
        folded = program.absent(_op_counts(source), program_ops)
        if folded:
            coverage["detail"] += "; not in the package, counted by the op table over the ONNX graph: " + (
                ", ".join(f"{t} x{n}" for t, n in folded.items())
            )
        report = {
            "plan": chosen,
            "compute_units": req["compute_units"],
            "compute_precision": precision,
            "deployment_target": req["deployment_target"],
            "coremltools": result.get("coremltools"),
            "torch": result.get("torch"),
            "spec_version": result.get("spec_version"),
            "constants_as_initializers": moved,
            "outputs_not_in_package": {o: f"the input {i} unchanged" for o, i in passthrough.items()},
            "converter_forms": forms,
            "check": {"against": "ONNX Runtime CPU, one seeded random input", "torch_vs_onnx": checks},
            "files": sorted(members),
            "not_run": "Core ML prediction exists only on macOS/iOS",
            "artifact_inputs": load["inputs"],
            "program_ops": program_ops,
            "onnx_ops_not_in_package": folded,
            "measurements": {"npu_coverage": coverage},
        }
        note = (
            f".mlpackage ({chosen['weights']} weights, {precision}, {req['compute_units']}); input "
            + ", ".join(f"{i['name']} {i.get('dtype')} {i.get('shape')}" for i in load["inputs"])
            + "".join(
                f"; output {o} is input {i} unchanged: not in the package" for o, i in passthrough.items()
            )
            + f"; {coverage['detail'].split(' of the ')[0]} ML Program operations on the Neural Engine by "
            f"{program.TOOL}; not run here (Core ML is macOS-only)"
        )
        return StageOutput(artifacts={"mlpackage": bundle}, report=report, note=note)


def _op_counts(model: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(model), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


class CoreMlEvaluate:
    """Stage "evaluate": Core ML cannot run on this machine; the stage is not run, SLOs stay unverified."""

    stage = "evaluate"

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        raise ToolchainMissing(
            "Core ML prediction runs only on macOS/iOS: the .mlpackage was built and checked, not run here"
        )
