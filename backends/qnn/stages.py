"""QNN stages on onnxruntime-qnn: QNN's own check, HTP-typed quantization and EPContext compile (the
HTP simulator's evaluate is backends.qnn.evaluate).

Every call into the QNN library runs in a child process (backends.qnn.driver). The SoC is named to
QNN by number (`qnn_soc_id` in the catalog; `compile.options.soc_model` may override it).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.passes.check import CheckPass
from backends.passes.quant.policy import Policy
from backends.passes.quant.stage import QuantizePass
from backends.qnn import STAGES, adapter, driver, fingerprint
from backends.qnn.validation import device_map, parse, rejected
from backends.sdk import artifact_check
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line
from backends.sdk.vocab import NODES_THAT_RUN

HTP_ACTIVATIONS = ("uint8", "uint16")
CONTEXT_SAMPLES = 1
"""Samples the compile check runs on the HTP simulator (one inference of a 320x320 detector takes ~4 s):
the first evaluation sample, or a seeded random input without evaluation data."""


def soc(target: Target, config: Mapping[str, Any]) -> dict[str, str]:
    """QNN's htp_arch ("75") and soc_model (a number) for the target; compile.options.dsp_arch and
    soc_model (a number, or a SoC name the catalog knows, e.g. SM8650) override them."""
    from backends.catalog import targets

    options: Mapping[str, Any] = (config.get("compile") or {}).get("options") or {}
    arch = str(options.get("dsp_arch") or target.extra.get("htp_arch") or "")
    wanted = str(options.get("soc_model") or target.extra.get("qnn_soc_id") or "")
    model = wanted
    if wanted and not wanted.isdigit():
        ids = {str(t.extra.get("qnn_soc_model")): t.extra.get("qnn_soc_id") for t in targets().values()}
        model = str(ids.get(wanted) or "")
    if not arch or not model.isdigit():
        raise TerminalError(
            f"qnn: target {target.id} needs htp_arch and a QNN soc_model number "
            f"(catalog qnn_soc_id or compile.options.soc_model; {wanted or 'none'!r} is not one)"
        )
    return {"htp_arch": arch.removeprefix("v"), "soc_model": model}


def _source(answer: Mapping[str, Any], chip: Mapping[str, str]) -> str:
    return (
        f"onnxruntime-qnn {answer.get('onnxruntime_qnn')} HTP validation "
        f"(htp_arch v{chip['htp_arch']}, soc_model {chip['soc_model']})"
    )


FINALIZING = "FinalizeGraphs started."
"""The EP's log line once every node's validation verdict is written: the check stops the session
there. What follows is QNN finalizing the HTP graph, the compile stage's work (its EPContext binary),
which took over 20 minutes on an EEG net's 7,500-sample 1-D convolutions. The check's placement is
QNN's verdicts, read from the log up to this line only: ORT's own "Node placements" block comes after
it, present or not depending on when the stop landed, so reading it would make the record depend on
timing. A graph QNN claims nothing of is never finalized, and its log is read whole."""


class QnnCheck(CheckPass):
    """The placement from QNN's own per-node validation (it wins over the op table; the report's
    `source` names it), with QNN's reason on each node it rejects."""

    def fingerprint(self) -> dict[str, str]:
        return {**super().fingerprint(), **fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        from backends.passes import placement as P
        from backends.passes.check import dump_json, quantization_config, summarize, write_log
        from backends.passes.facts import name_nodes

        chip = soc(request.target, request.config)
        model = onnx.load(str(request.inputs["model"]))
        name_nodes(model)
        with tempfile.TemporaryDirectory(prefix="npuctl-qnn-check-") as tmp:
            job = Path(tmp)
            onnx.save(model, str(job / "model.onnx"))
            native = job / "native.log"
            answer = driver.call(
                {"mode": "validate", "model": "model.onnx", **chip}, job, native, stop_at=FINALIZING
            )
            # what the log holds after the marker depends on when the session was stopped: never read
            verdicts, finalizing, _ = native.read_text(errors="replace").partition(FINALIZING)
            found = parse(verdicts)
        if not found.verdicts:
            raise TerminalError("qnn check: onnxruntime-qnn logged no per-node validation")
        source = _source(answer, chip)
        names = [n.name for n in model.graph.node]
        report = P.compute(
            model,
            request.target,
            quantization_config(request.config),
            device_map=device_map(names, found),
            device_map_source=source,
        )
        for node in report["nodes"]:
            verdict = found.verdicts.get(node["name"])
            if verdict is not None and verdict.reason:
                node["failed"] = [f"QNN: {verdict.reason}"]
        path = request.workdir / "placement.json"
        path.write_text(dump_json(report))
        write_log(request.log, report)
        summary = summarize(report)
        summary["measurements"] = P.measurements(report)
        summary["qnn_validation"] = {
            "source": source,
            "passed": sum(1 for v in found.verdicts.values() if v.passed),
            "failed": {
                v.node: v.reason or "validation failed" for v in found.verdicts.values() if not v.passed
            },
            # ONNX Runtime places nodes after QNN finalizes the graph: read at compile, not here
            "placed_on_cpu": None if finalizing else sorted(found.cpu),
        }
        cov = report["coverage"]["nodes"]
        note = f"{cov['npu']}/{cov['total']} {NODES_THAT_RUN} on the HTP ({source})"
        return StageOutput(artifacts={"placement": path}, report=summary, note=note)


QNN_QDQ_KEYS = (
    "MinimumRealRange",
    "DedicatedQDQPair",
    "TensorQuantOverrides",
    "QDQOpTypePerChannelSupportToAxis",
)
"""The parts of ORT's get_qnn_qdq_config taken over (calibration, types and symmetry stay the spec's)."""


def qnn_options(model: Path, policy: Policy) -> dict[str, Any]:
    """extra_options from ONNX Runtime's QNN QDQ config for this model and the HTP types chosen: the
    HTP's fixed ranges for ops such as Sigmoid/Tanh at 16 bits, per-channel axes, no dedicated Q/DQ
    pairs. The QNN config's own calibration reader is never run (the shared pass calibrates)."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from backends.passes.quant.policy import quant_type

    class _NoData:
        def get_next(self) -> None:
            return None

    wide = {"uint16": QuantType.QUInt16, "uint8": QuantType.QUInt8}
    config = get_qnn_qdq_config(
        str(model),
        _NoData(),
        activation_type=wide.get(policy.activations, quant_type(policy.activations)),
        weight_type=quant_type(policy.weights),
        per_channel=policy.per_channel,
        activation_symmetric=policy.activation_symmetric,
        weight_symmetric=policy.weight_symmetric,
    )
    extra = dict(config.extra_options)
    activation = wide.get(policy.activations, quant_type(policy.activations))
    if activation == QuantType.QUInt8:
        scales = layernorm_scales(model)
        overrides = dict(extra.get("TensorQuantOverrides") or {})
        for name in scales:
            overrides.setdefault(name, [{"quant_type": QuantType.QUInt8}])
        extra["TensorQuantOverrides"] = overrides
    return {k: extra[k] for k in QNN_QDQ_KEYS if k in extra and extra[k] not in (None, {})}


def layernorm_scales(model: Path) -> list[str]:
    """The scale (gamma) initializers of LayerNormalization nodes. The HTP validates an 8-bit LayerNorm
    only with its scale in the activations' unsigned type: with int8 weights it refused all six of a
    transformer encoder's (backendValidateOpConfig error 3110), with uint8 scales it took them."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    return sorted(
        {
            n.input[1]
            for n in proto.graph.node
            if n.op_type == "LayerNormalization" and len(n.input) > 1 and n.input[1] in inits
        }
    )


class QnnQuantizePass(QuantizePass):
    """The shared ptq pass with QNN's QDQ config merged into the quantizer's options; the HTP runs the
    graph integer (Policy.integer_graph)."""

    def policy(self, request: StageRequest) -> Policy:
        base = super().policy(request)
        if base.mode != "ptq":
            return base
        # the HTP context runs the whole graph: a float tail beside QDQ nodes disagreed with its
        # source on the simulator (PP-OCR det, cosine 0.24), so placement keeps every op integer
        return replace(
            base, backend_options=qnn_options(Path(request.inputs["model"]), base), integer_graph=True
        )


def qnn_preprocess(source: Path, dest: Path) -> bool:
    """ONNX Runtime's qnn_preprocess_model (fuses Erf-Gelu, ReduceMean-LayerNorm... into the ops QNN
    has), run with the model's metadata_props cleared (ORT 1.32 raises TypeError on them) and put
    back after, so the records earlier stages left in the model travel on. True when it changed."""
    import onnx
    from onnxruntime.quantization.execution_providers.qnn import qnn_preprocess_model

    model = onnx.load(str(source))
    props = [(p.key, p.value) for p in model.metadata_props]
    del model.metadata_props[:]
    bare = dest.with_name(dest.stem + "-bare.onnx")
    onnx.save(model, str(bare))
    try:
        changed = bool(qnn_preprocess_model(str(bare), str(dest), fuse_layernorm=True))
    except Exception as exc:  # noqa: BLE001 - ORT raises plain exceptions
        raise TerminalError(f"qnn_preprocess_model failed: {one_line(exc, 200)}") from exc
    finally:
        bare.unlink(missing_ok=True)
    result = onnx.load(str(dest)) if changed else model
    del result.metadata_props[:]
    for key, value in props:
        entry = result.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(result, str(dest))
    return changed


class QnnQuantize(adapter.QnnQuantize):
    """The shared ptq pass with the HTP's types: uint8 activations (uint16 for int16 keeps), int8
    symmetric weights, and ONNX Runtime's QNN QDQ config (get_qnn_qdq_config) for the rest; a signed
    activation type is refused, the HTP computes unsigned ones."""

    def quantize_pass(self) -> QuantizePass:
        return QnnQuantizePass()

    def run(self, request: StageRequest) -> StageOutput:
        from backends.passes.quant.policy import resolve

        policy = resolve(request.config, request.target)
        if policy.mode == "ptq" and policy.activations not in HTP_ACTIVATIONS:
            raise TerminalError(
                f"quantization.activations: {policy.activations} is not an HTP activation type "
                f"(the QNN HTP runs {' or '.join(HTP_ACTIVATIONS)})"
            )
        prepared = request
        fused = False
        if policy.mode == "ptq":
            fused_model = request.workdir.parent / f"{request.workdir.name}-qnn-pre.onnx"
            fused = qnn_preprocess(Path(request.inputs["model"]), fused_model)
            prepared = replace(request, inputs={**request.inputs, "model": fused_model})
        output = super().run(prepared)
        output.report["htp_types"] = {"activations": policy.activations, "weights": policy.weights}
        output.report["qnn_preprocess_model"] = "fused ops" if fused else "no change"
        if policy.mode == "ptq":
            options = qnn_options(Path(request.inputs["model"]), policy)
            output.report["qnn_qdq_config"] = {
                k: (sorted(v) if isinstance(v, dict) else v) for k, v in options.items()
            }
        return output


def context_files(ctx_model: Path) -> list[str]:
    """The context binaries an EPContext model names (embed_mode 0), each once. A graph split over
    several partitions has several EPContext nodes; only a context's main node names its file (the
    others run a graph inside a context another node holds), so a node without `ep_cache_context`
    names none."""
    import onnx

    model = onnx.load(str(ctx_model), load_external_data=False)
    out: list[str] = []
    for node in model.graph.node:
        if node.op_type != "EPContext":
            continue
        attrs = {a.name: a for a in node.attribute}
        embedded = attrs.get("embed_mode") is not None and attrs["embed_mode"].i == 1
        named = attrs.get("ep_cache_context")
        if not embedded and named is not None and named.s.decode() not in out:
            out.append(named.s.decode())
    return out


def partitions(ctx_model: Path) -> int:
    """The graphs QNN compiled: one EPContext node each."""
    import onnx

    model = onnx.load(str(ctx_model), load_external_data=False)
    return sum(n.op_type == "EPContext" for n in model.graph.node)


def stopped_at(native: Path) -> str:
    """The clause naming the nodes QNN refused, from the compile's own log; "" when it names none."""
    named = rejected(native.read_text(errors="replace")) if native.is_file() else ""
    return f"; QNN refused {named}" if named else ""


class QnnCompile(adapter.QnnCompile):
    """An EPContext model + context binary for the target's htp_arch/soc_model, prepared by QNN's HTP
    backend here; the SDK bundle (qnn-onnx-converter / DLC users) stays as an extra artifact."""

    adapter_version = STAGES["compile"].version

    def fingerprint(self) -> dict[str, str]:
        return {**super().fingerprint(), **fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        output = super().run(request)
        chip = soc(request.target, request.config)
        source = Path(request.inputs["model"])
        with tempfile.TemporaryDirectory(prefix="npuctl-qnn-compile-") as tmp:
            job = Path(tmp)
            shutil.copyfile(source, job / "model.onnx")
            request_ = {"mode": "compile", "model": "model.onnx", "context_model": "model_ctx.onnx", **chip}
            native = job / "native.log"
            try:
                answer = driver.call(request_, job, native)
            except TerminalError as exc:
                raise TerminalError(f"{exc}{stopped_at(native)}") from exc
            ctx = job / "model_ctx.onnx"
            binaries = context_files(ctx) if ctx.is_file() else []
            if not binaries or not all((job / b).is_file() for b in binaries):
                raise TerminalError(
                    f"qnn compile: onnxruntime-qnn wrote no EPContext model with its binary{stopped_at(native)}"
                )
            graphs = partitions(ctx)
            if len(binaries) != 1:  # onnxruntime-qnn writes every partition's graph into one context
                raise TerminalError(
                    f"qnn compile: {graphs} partitions in {len(binaries)} context binaries; one context "
                    f"binary expected{stopped_at(native)}"
                )
            model = onnx.load(str(ctx), load_external_data=False)
            ops = sorted({n.op_type for n in model.graph.node})
            agreed = check_context(job, source, chip, request)
            shutil.copyfile(ctx, request.workdir / "model_ctx.onnx")
            # the binary keeps the name the EPContext node refers to: the pair loads side by side
            shutil.copyfile(job / binaries[0], request.workdir / binaries[0])
        bin_path = request.workdir / binaries[0]
        output.artifacts["context_model"] = request.workdir / "model_ctx.onnx"
        output.artifacts["context_binary"] = bin_path
        cpu_nodes = [n.op_type for n in model.graph.node if n.op_type != "EPContext"]
        output.report["epcontext"] = {
            "onnxruntime_qnn": answer.get("onnxruntime_qnn"),
            "htp_arch": f"v{chip['htp_arch']}",
            "soc_model": chip["soc_model"],
            "context_binary_bytes": bin_path.stat().st_size,
            "binary_name": binaries[0],
            "partitions": graphs,
            "graph_ops": ops,
            "nodes_outside_context": len(cpu_nodes),
            "check": {**agreed, "how": "HTP simulator vs ONNX Runtime CPU on the model compiled"},
        }
        split = f", {graphs} HTP partitions with the CPU between them" if graphs > 1 else ""
        output.note = (
            f"EPContext model + {bin_path.stat().st_size} byte context binary for v{chip['htp_arch']} "
            f"(soc_model {chip['soc_model']}{split}); SDK bundle beside it; {artifact_check.summary(agreed)}"
        )
        partitioned = partition_account(source, model, request, str(answer.get("onnxruntime_qnn")))
        output.report["placement"] = partitioned["summary"]
        output.report["measurements"] = partitioned["measurements"]
        output.note += f"; {partitioned['note']}"
        return output


QNN_TOOL = "onnxruntime-qnn"


def partition_account(source: Path, ctx: Any, request: StageRequest, version: str) -> dict[str, Any]:
    """Placement from QNN's own partitioning of the compiled model: the nodes the EPContext model keeps
    outside its context run on the CPU, every other node is inside the HTP context. It wins over the
    op table and over check's per-node validation (which saw the model before rewrite and quantize);
    the op table's placement and the nodes where it disagrees are kept beside it."""
    import onnx

    from backends.passes import placement as P
    from backends.passes.check import quantization_config, summarize
    from backends.sdk.vocab import estimated_by

    model = onnx.load(str(source), load_external_data=False)
    outside = {n.name for n in ctx.graph.node if n.op_type != "EPContext"}
    devices = {n.name: ("CPU" if n.name in outside else "NPU") for n in model.graph.node}
    where = f"{QNN_TOOL} {version} EPContext partitioning"
    report = P.with_tool(model, request.target, quantization_config(request.config), devices, QNN_TOOL, where)
    cov = report["coverage"]["nodes"]
    note = f"{QNN_TOOL}: {cov['npu']}/{cov['total']} nodes inside the HTP context"
    disagree = P.disagreement_note(report)
    return {
        "summary": summarize(report),
        "measurements": {
            k: v
            for k, v in P.measurements(report, estimated_by(QNN_TOOL)).items()
            if k != "latency_ms.estimate"  # the roofline stays check's: the partitioning times nothing
        },
        "note": f"{note}; {disagree}" if disagree else note,
    }


def check_context(job: Path, source: Path, chip: Mapping[str, str], request: StageRequest) -> dict[str, Any]:
    """The compiled context model against its source, with the compile check every backend uses
    (backends.sdk.artifact_check.judge: errors relative to each output channel's range, the integer or
    half precision tolerance, then fidelity to the float model beside the CPU int8 model's);
    TerminalError outside it."""
    from backends.passes import data

    specs = data.model_inputs(source)
    samples, where = artifact_check.check_samples(request, specs, CONTEXT_SAMPLES)
    _write_samples(job / "check.npz", [[sample.feed[spec.name] for spec in specs] for sample in samples])
    run = {
        "mode": "run",
        "model": "model_ctx.onnx",
        "samples": "check.npz",
        "count": len(samples),
        "inputs": [spec.name for spec in specs],
        "outputs": "check-out.npz",
        "profile": str(job / "check-profile.csv"),
        **chip,
    }
    driver.call(run, job, job / "check.log")
    reference = artifact_check.run_source(source, samples)
    got = _read_outputs(job / "check-out.npz", len(samples), reference)
    limit = artifact_check.tolerance("f16", quantized=artifact_check.quantized_source(source))
    what = "qnn compile: the context model on the HTP simulator"
    return artifact_check.judge(request, source, samples, got, limit, what, where, reference)


def _write_samples(path: Path, samples: list[list[Any]]) -> None:
    import numpy as np

    arrays = {f"s{i:06d}_{j}": value for i, feeds in enumerate(samples) for j, value in enumerate(feeds)}
    with path.open("wb") as fh:
        np.savez(fh, **arrays)


def _read_outputs(path: Path, count: int, reference: Any) -> Any:
    import numpy as np

    from backends.passes import accuracy

    out = accuracy.ModelOutputs(reference.names)
    with np.load(path) as archive:
        for i in range(count):
            out.values.append(
                [
                    np.asarray(archive[f"s{i:06d}_{k}"], dtype=np.float32).reshape(
                        reference.values[i][k].shape
                    )
                    for k in range(len(reference.names))
                ]
            )
    return out
