"""quantize (ONNX -> TFLite with onnx2tf) and evaluate (LiteRT on the host) for TFLite-taking backends.

quantize picks one variant from the spec: mode none -> float32, fp16 -> float16, ptq -> full int8
(int8 in and out) calibrated on `quantization.calibration`, or int16 activations with int8 weights
(16x8) when the spec asks for 16-bit activations or keeps sensitive layers at int16. onnx2tf writes the
float32 TFLite and its SavedModel; the worker quantizes that SavedModel into the one variant asked for.
Sensitive layers kept in float (keep: fp16/fp32) stay float32 ops inside the int8 model (LiteRT's
selective quantization), and so do, with `placement: target`, a decode's concats that join tensors of
mixed ranges and the arithmetic feeding them (decode_tail); a kept layer that writes a model output
leaves that output float32. An int16 keep widens every layer (TFLite has no per-layer 16x8). Every written
variant is checked against the ONNX model on a few samples before anything is recorded (backends.tflite.check).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.passes.quant.policy import FLOAT_KEEPS, Policy, calibration_folder, match_rules, resolve
from backends.passes.quant.qdq_placement import MIX_FACTOR
from backends.passes.quantized import quantized
from backends.passes.rewrite.converter_forms import disabled
from backends.sdk.base import StageLog, StageOutput, StageRequest
from backends.sdk.errors import TerminalError
from backends.tflite import convert, fingerprint
from backends.tflite.prepare import Prepared, prepare

INT16 = ("int16", "uint16")
RANDOM_CHECK = 4
"""Random feeds the float conversion is checked on when the stage has no data (mode none, no evaluate.data)."""


def choose(policy: Policy, target: Target, allowed: tuple[str, ...]) -> tuple[str, list[str]]:
    """(variant, notes) for the spec's quantization policy on `target`."""
    notes: list[str] = []
    if policy.mode == "none":
        variant = "float32"
    elif policy.mode == "fp16":
        variant = "float16"
    elif policy.mode == "ptq":
        rules = policy.sensitive
        if rules is not None and rules.auto is not None:
            raise TerminalError(
                "quantization.sensitive_layers.auto: the layer search is not built for TFLite targets; "
                "name the layers to keep (nodes, op_types, first, last)"
            )
        float_keep = rules is not None and rules.keep in FLOAT_KEEPS and rules.explicit
        wide = policy.activations in INT16 or (rules is not None and rules.keep == "int16")
        if float_keep and wide:
            raise TerminalError(
                "quantization.sensitive_layers.keep: float layers inside a 16-bit-activation TFLite are not "
                "built (TF's selective quantizer is int8 only); use activations: int8 or keep: int16"
            )
        variant = "int16_act" if wide else "full_int8"
        if rules is not None and rules.keep == "int16":
            notes.append(
                "keep int16: TFLite widens every layer's activations to int16, not only the kept ones"
            )
        if float_keep and rules is not None and rules.keep == "fp16":
            notes.append("keep fp16: the kept layers are float32 ops in the TFLite (it has no fp16 compute)")
        if policy.activations == "uint8":
            notes.append("TFLite quantizes activations as asymmetric int8 (the same grid as uint8, shifted)")
    else:
        raise TerminalError(
            f"quantization.mode {policy.mode}: the tflite toolchain converts float models only"
        )
    if variant not in allowed:
        raise TerminalError(
            f"quantization.mode {policy.mode}: target {target.id} takes {' or '.join(allowed)} TFLite "
            f"(its precisions: {', '.join(target.precisions)}); set quantization.mode: ptq"
        )
    return variant, notes


def write_calibration(files: list[Path], source: Path, job: Path, prep: Prepared) -> dict[str, str]:
    """One stacked .npy per input, keyed by the name onnx2tf sees, in the input's own dtype (token ids
    stay integers), channels last where onnx2tf makes the input channels-last (its calibration layout)."""
    import numpy as np

    from backends.passes import data

    specs = data.model_inputs(source)
    samples = [data.read_sample(f, specs) for f in files]
    new = {original: name for name, original in prep.renamed.inputs.items()}
    out: dict[str, str] = {}
    for spec in specs:
        name = new.get(spec.name, spec.name)
        stacked = np.concatenate([np.asarray(s.feed[spec.name], dtype=spec.dtype) for s in samples])
        if stacked.ndim >= 3 and name not in prep.channels_last:
            stacked = stacked.transpose(0, *range(2, stacked.ndim), 1)
        path = job / f"calib-{len(out)}.npy"
        np.save(path, np.ascontiguousarray(stacked))
        out[name] = str(path)
    return out


def calibration_files(request: StageRequest, policy: Policy) -> list[Path]:
    from backends.passes import data

    folder = calibration_folder(request.inputs)
    return data.select_files(folder, policy.samples or None, policy.seed, "quantization.calibration.data")


def check_data(request: StageRequest, source: Path, files: list[Path]) -> tuple[list[Any], Any, Any, str]:
    """(samples, labels, task, where from) the written variants are checked on."""
    from backends.passes import data
    from backends.passes.quant.check import FEW
    from backends.tflite.check import check_set

    if files or request.inputs.get("eval_data") is not None:
        chosen = check_set(request, source, files)
        labels = None if chosen.labels is None else list(chosen.labels)[:FEW]
        samples = list(chosen.samples)[:FEW]
        return samples, labels, chosen.task, f"{len(samples)} samples of {chosen.source}"
    samples = data.random_samples(data.model_inputs(source), RANDOM_CHECK)
    return samples, None, None, f"{len(samples)} random inputs (no data given)"


def build(
    request: StageRequest, allowed: tuple[str, ...], out_dir: Path
) -> tuple[Path, Path, dict[str, Any]]:
    """Converts request.inputs["model"] (ONNX) to the TFLite the spec asks for: (model.tflite,
    tflite.json (variant + I/O ties + kept float layers), report)."""
    import onnx

    from backends.passes.data import model_inputs
    from backends.tflite.check import run_checks, write_samples

    log = StageLog(Path(request.log))
    policy = resolve(request.config, request.target)
    source = Path(request.inputs["model"])
    structure = onnx.load(str(source), load_external_data=False)  # the graph, read once here
    arrived = quantized(n.op_type for n in structure.graph.node)
    if arrived is not None:
        raise TerminalError(
            f"the model arrives quantized ({arrived.text()}), and onnx2tf converts float models only; give "
            f"{request.target.id} the float model with quantization.mode: ptq"
        )
    variant, notes = choose(policy, request.target, allowed)
    kept: dict[str, str] = {}
    if policy.sensitive is not None and policy.sensitive.explicit and policy.mode == "ptq":
        kept = match_rules(structure, policy.sensitive)
    float_keep = sorted(kept) if policy.sensitive is not None and policy.sensitive.keep in FLOAT_KEEPS else []
    files = calibration_files(request, policy) if policy.mode == "ptq" else []
    if variant == "full_int8" and policy.placement == "target":
        decode = decode_tail(source, kept, files)
        kept.update(decode)
        float_keep = sorted({*float_keep, *decode})
        if decode:
            notes.append(
                f"placement target: a decode joining ranges over {MIX_FACTOR:g}x apart kept float32 "
                f"({len(decode)} node(s): its concats and the arithmetic feeding them), their inputs "
                "quantized apart (a model output one of them writes stays float32)"
            )
    samples, labels, task, where = check_data(request, source, files)
    with tempfile.TemporaryDirectory(prefix="npuctl-tflite-") as tmp:
        job = Path(tmp)
        prep = prepare(source, job / "model.onnx", log, skip=disabled(request.config))
        calibration = write_calibration(files, source, job, prep) if files else {}
        write_samples(job / "check.npz", samples, [spec.name for spec in model_inputs(source)])
        wanted = {
            "variant": variant,
            "keep": [prep.renamed.new_node(n) for n in float_keep],
            "names": {**prep.renamed.inputs, **prep.renamed.outputs},
            "channels_last": list(prep.channels_last),
        }
        result = converted(job, calibration, wanted, request)
        chosen = result["variants"].get(variant)
        if chosen is None:
            raise TerminalError(f"onnx2tf wrote no {variant} model")
        if chosen.get("kept"):
            chosen["kept"] = {
                prep.renamed.original(k): {**v, "via": [prep.renamed.original(n) for n in v.get("via", [])]}
                for k, v in chosen["kept"].items()
            }
        checks = run_checks(result, source, samples, labels, task, where, request.log)
        placed = kept_layers(chosen, kept, float_keep, policy)
        out = out_dir / "model.tflite"
        shutil.copyfile(chosen["file"], out)
    io_path = out_dir / "tflite.json"
    record = {"format_version": 1, "variant": variant, "io": chosen["io"], "kept_float": float_keep}
    io_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    report: dict[str, Any] = {
        "mode": policy.mode,
        "variant": variant,
        "policy": policy.describe(),
        "tflite": {"inputs": chosen["inputs"], "outputs": chosen["outputs"]},
        "checks": checks,
        "calibration": {"samples": len(files)},
        "converter_forms": list(prep.forms),
        "channels_last_inputs": [prep.renamed.original(n) for n in prep.channels_last],
        "kept": placed,
        "toolchain": {"onnx2tf": result.get("onnx2tf"), "tensorflow": result.get("tensorflow")},
        "size_bytes": out.stat().st_size,
    }
    if notes:
        report["notes"] = notes
    log(json.dumps(report, indent=1, sort_keys=True))
    return out, io_path, report


DECODE_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})
"""The decode's ops that make new values (a box from an anchor, a distance and a stride); the others in
a tail (Reshape, Slice, Transpose, Sigmoid into 0-1) carry their input's scale or range over."""


def decode_tail(source: Path, kept: Mapping[str, str], files: list[Path]) -> dict[str, str]:
    """`placement: target` on a TFLite target: where the tail after the last compute op joins tensors
    whose ranges, measured on the float model over the first calibration samples, are over MIX_FACTOR
    apart (a detector's boxes in pixels beside scores in 0-1; mixed_joins in
    backends.passes.quant.qdq_placement), those concats and the tail's arithmetic feeding them stay
    float32, their inputs quantized apart. TF's converter calibrates by itself, one int8 scale per
    tensor: under one scale every score of such a concat rounds to zero (NudeNet's box F1 0), and the
    boxes, made from anchors and distances of three levels and scaled by each level's stride under one
    scale, move by whole grid steps (a YOLOv8-seg's box F1 0.70 with the concats alone float, 0.95 with
    its box arithmetic too). That is a few thousand elements on the CPU beside the NPU's body; a tail
    of like ranges stays int8 on the NPU."""
    import onnx

    from backends.passes import data
    from backends.passes.quant.channel_ranges import SAMPLES
    from backends.passes.quant.qdq_placement import data_tail, joining_concats, mixed_joins

    model = onnx.load(str(source), load_external_data=False)
    if not joining_concats(model):  # nothing to measure: no sample is read
        return {}
    specs = data.model_inputs(source)
    samples = [data.read_sample(p, specs) for p in files[:SAMPLES]]
    found = {m.node: m for m in mixed_joins(model, samples, "kept float32, its inputs quantized apart")}
    out = {
        node: f"placement target: a decode's concat of ranges {m.ratio:.0f}x apart"
        for node, m in found.items()
        if node not in kept
    }
    by_name = {node.name: node for node in model.graph.node}
    made = {t: node.name for node in model.graph.node for t in node.output if t}
    tail = set(data_tail(model))
    todo, seen = list(found), set()
    while todo:  # back from each mixed concat through the tail
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = by_name[name]
        if node.op_type in DECODE_ARITHMETIC and name not in kept:
            out[name] = "placement target: the decode arithmetic feeding a concat of mixed ranges"
        todo.extend(made[t] for t in node.input if t in made and made[t] in tail)
    return out


def kept_layers(
    chosen: Mapping[str, Any], kept: Mapping[str, str], float_keep: list[str], policy: Policy
) -> list[dict[str, Any]]:
    """The report's kept layers; raises when a float-kept layer is not float in the written model."""
    if not float_keep:
        return [{"node": n, "precision": "int16", "rule": r} for n, r in sorted(kept.items())]
    found: Mapping[str, Any] = chosen.get("kept") or {}
    out = []
    for node in float_keep:
        where = found.get(node) or {}
        if where.get("dtype") != "float32":
            raise TerminalError(
                f"quantization.sensitive_layers: kept layer {node!r} is {where.get('dtype', 'missing')} in the "
                f"TFLite, not float32 (TFLite op {where.get('tflite', '?')!r})"
            )
        out.append(
            {
                "node": node,
                "precision": "fp32",
                "rule": kept[node],
                "tflite_op": where["op"],
                "tflite_tensor": where["tflite"],
                "fused_with": where["via"][1:],
            }
        )
    return out


def converted(
    job: Path, calibration: Mapping[str, str], wanted: Mapping[str, Any], request: StageRequest
) -> dict[str, Any]:
    """The worker's result for job/model.onnx, these calibration arrays, check samples and the wanted
    variant, through a cache keyed by all their bytes and the toolchain fingerprint: specs for
    different TFLite targets (an Ethos-U and a MediaTek APU) of one model share one conversion."""
    import hashlib

    digest = hashlib.sha256((job / "model.onnx").read_bytes())
    for name in sorted(calibration):
        digest.update(name.encode() + b"\0" + Path(calibration[name]).read_bytes())
    digest.update((job / "check.npz").read_bytes())
    digest.update(json.dumps([fingerprint(), wanted], sort_keys=True).encode())
    given = request.inputs.get("cache_dir")
    if given is None:
        return _convert(job, calibration, wanted, request)
    root = Path(given) / "tflite"
    root.mkdir(parents=True, exist_ok=True)
    entry = root / digest.hexdigest()[:32]
    import fcntl

    with (root / f"{entry.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second spec converting the same model waits, then reuses
        if not (entry / "result.json").is_file():
            _store(entry, _convert(job, calibration, wanted, request))
    result: dict[str, Any] = json.loads((entry / "result.json").read_text())
    for variant in result["variants"].values():
        variant["file"] = str(entry / variant["file"])
    outputs = result.get("check_outputs") or {}
    for name in outputs:
        outputs[name] = str(entry / outputs[name])
    return result


def _convert(
    job: Path, calibration: Mapping[str, str], wanted: Mapping[str, Any], request: StageRequest
) -> dict[str, Any]:
    req = {
        "model": str(job / "model.onnx"),
        "output": str(job / "out"),
        "calibration": dict(calibration),
        "check": str(job / "check.npz"),
        **wanted,
    }
    return convert(req, job, request.log)


def _store(entry: Path, result: dict[str, Any]) -> None:
    """The result, its variant files and check outputs under `entry`, renamed into place complete."""
    staging = Path(tempfile.mkdtemp(prefix=".entry-", dir=entry.parent))
    stored = json.loads(json.dumps(result))
    for name, variant in stored["variants"].items():
        shutil.copyfile(variant["file"], staging / f"{name}.tflite")
        variant["file"] = f"{name}.tflite"
    outputs = stored.get("check_outputs") or {}
    for name, path in outputs.items():
        shutil.copyfile(path, staging / f"check-{name}.npz")
        outputs[name] = f"check-{name}.npz"
    (staging / "result.json").write_text(json.dumps(stored, indent=1, sort_keys=True))
    shutil.rmtree(entry, ignore_errors=True)
    staging.rename(entry)


def note_for(report: Mapping[str, Any], out: Path) -> str:
    check = report["checks"].get(report["variant"])
    note = f"onnx2tf {report['variant']} TFLite ({out.stat().st_size} bytes)"
    floats = [k["node"] for k in report.get("kept", []) if k["precision"] == "fp32"]
    if floats:
        note += f", {len(floats)} layer(s) kept float32: {', '.join(floats)}"
    if check is not None:
        note += (
            f"; vs ONNX on {check['data']}: {check['metric']} {check.get('quantized', check.get('score', 0)):.4f} "
            f"(float {check['float']:.4f}), "
            f"worst cosine {check['cosine']:.4f}"
        )
    return note


class TfliteQuantize:
    """Stage "quantize" for TFLite-taking backends; `allowed` lists the variants the target runs. The
    artifact `model` is a tar of model.tflite + tflite.json + the ONNX model it was converted from
    (compile unpacks it, see `tflite_of`, and maps the compiler's account back to that model's nodes)."""

    stage = "quantize"

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        from backends.sdk import bundles

        with tempfile.TemporaryDirectory(prefix="npuctl-tflite-out-") as tmp:
            tflite, io_path, report = build(request, self.allowed, Path(tmp))
            note = note_for(report, tflite)
            members: dict[str, bytes | Path] = {
                "model.tflite": tflite,
                "tflite.json": io_path,
                SOURCE: Path(request.inputs["model"]),
            }
            bundle = bundles.write(request.workdir / "model.tflite.tar", members)
        return StageOutput(artifacts={"model": bundle}, report=report, note=note)


SOURCE = "source.onnx"
"""The quantize bundle's copy of the ONNX model onnx2tf converted."""


def source_onnx(request: StageRequest, tflite: Path) -> Path | None:
    """The ONNX model compile's TFLite was converted from: compile's own input when it converted here,
    else the copy in quantize's bundle (unpacked beside the TFLite by `tflite_of`); None in a bundle
    written before the copy was kept."""
    given = Path(request.inputs["model"])
    from backends.sdk import bundles

    if not bundles.is_bundle(given):
        return given
    copy = tflite.with_name(SOURCE)
    return copy if copy.is_file() else None


def tflite_of(request: StageRequest, allowed: tuple[str, ...]) -> tuple[Path, Path, dict[str, Any] | None]:
    """compile's TFLite: unpacked from quantize's bundle, or converted here (float) when quantize was
    idle (quantization.mode none passes the ONNX through). Files land in request.workdir."""
    from backends.sdk import bundles

    source = Path(request.inputs["model"])
    if bundles.is_bundle(source):
        folder = bundles.extract(source, request.workdir / "tflite")
        return folder / "model.tflite", folder / "tflite.json", None
    tflite, io_path, report = build(request, allowed, request.workdir)
    return tflite, io_path, report


def _count(calibration: Mapping[str, str]) -> int:
    import numpy as np

    for path in calibration.values():
        return int(np.load(path, mmap_mode="r").shape[0])
    return 0


class TfliteEvaluate:
    """The .tflite on LiteRT on this host (benchprog in the tflite venv): accuracy against the float ONNX,
    `measured:host`. Host latency is kept in the report only when `host_latency` is False: an x86 CPU
    says nothing about a microcontroller's or an APU's time, so those backends give their own estimate."""

    stage = "evaluate"
    host_latency = False

    def fingerprint(self) -> dict[str, str]:
        return fingerprint()

    def run(self, request: StageRequest) -> StageOutput:
        result, found, report = self.measure(request)
        lat = result["latency_ms"]
        accuracy = report["accuracy"]
        note = (
            f"LiteRT on this host ({report['variant']}): {accuracy['task']} {accuracy['metric']} {accuracy['accuracy']:.4f} "
            f"(float {accuracy['reference']:.4f}), host p50 {lat['p50']:.3f} ms"
        )
        return StageOutput(report={**report, "measurements": found}, note=note)

    def measure(self, request: StageRequest) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        from backends.passes.data import model_inputs
        from backends.runners import write_request
        from backends.runners.benchprog import FORMAT_VERSION
        from backends.runners.local import LocalRunner
        from backends.sdk import measure
        from backends.sdk.measure import measurements, score_job, task_and_labels, write_job_samples
        from backends.tflite import venv_python
        from backends.tflite.worker import QUANTIZED

        cfg: Mapping[str, Any] = request.config.get("evaluate") or {}
        if str(cfg.get("runner", "local")) != "local":
            raise TerminalError(f"evaluate.runner {cfg.get('runner')!r}: TFLite runs here only on the host")
        model, io_file, reference = (request.inputs.get(k) for k in ("tflite", "tflite_io", "float_model"))
        if model is None or io_file is None or reference is None:
            raise TerminalError("evaluate needs compile's tflite and tflite_io, and the float ONNX")
        record = json.loads(Path(io_file).read_text())
        specs = model_inputs(Path(reference))
        samples, data_source = measure.samples(request, specs)
        task, labels = task_and_labels(request, samples, Path(reference))
        runner = LocalRunner(interpreter=str(venv_python()))
        threads = int((request.config.get("compile") or {}).get("cores") or 2)
        with tempfile.TemporaryDirectory(prefix="npuctl-litert-") as tmp:
            job = Path(tmp)
            shutil.copyfile(model, job / "model.tflite")
            write_job_samples(job / "samples.npz", samples, specs)
            write_request(
                job,
                {
                    "format_version": FORMAT_VERSION,
                    "runtime": "litert",
                    "model": "model.tflite",
                    "options": {
                        "io": record["io"],
                        "threads": threads,
                        "reference_outputs": record["variant"] in QUANTIZED,
                    },
                    "warmup": int(cfg.get("warmup", 10)),
                    "runs": int(cfg.get("runs", 100)),
                    "seed": 0,
                    "samples": "samples.npz",
                    "sample_inputs": [spec.name for spec in specs],
                    "outputs": "outputs.npz",
                },
            )
            result = runner.run(job, float(cfg.get("timeout_s", 600)), request.log)
            accuracy = score_job(job, result, Path(reference), samples, labels, task)
        found = measurements(result, runner, accuracy, Path(model), data_source)
        ran = f"LiteRT {result.get('runtime_version')} on this host, {record['variant']} TFLite"
        for value in found.values():
            if value["evidence"] == "measured:host":
                value["detail"] = f"{ran}; {value['detail']}"
        if not self.host_latency:
            for key in [k for k in found if k.startswith("latency_ms.") or k == "peak_memory_mb"]:
                del found[key]
        report = {
            "variant": record["variant"],
            "runner": f"local ({ran})",
            "host_latency_ms": {k: v for k, v in result["latency_ms"].items() if k != "samples"},
            "host_memory": result["memory"],
            "accuracy": accuracy.as_dict(),
            "data": {"source": data_source, "samples": len(samples)},
        }
        return result, found, report
