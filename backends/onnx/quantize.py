"""The quantize stage: ptq (ONNX Runtime static QDQ), fp16, and validation of qat models.

ptq: the float model is prepared once (opset raised to >= 13, nodes named, ONNX Runtime's
quant_pre_process), its activation ranges come from `calibration` (cached by the digest of the exact
samples, model and method), and every model built from then on (the search's candidates and the
final artifact) reuses those ranges through `quantize_static(calibration_cache_path=...)`. Sensitive
layers are kept at the `keep` precision: fp32/fp16 by exclusion from quantization, int16 through
TensorQuantOverrides. `auto` adds layers chosen by measured sensitivity (backends.onnx.sensitivity).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.base import StageLog, StageOutput, StageRequest
from backends.catalog import Target
from backends.errors import TerminalError, one_line
from backends.onnx import auto_search, calibration, data, sensitivity
from backends.onnx.quant_policy import (
    COMPUTE_OPS,
    FLOAT_KEEPS,
    Policy,
    has_float,
    int16_overrides,
    match_rules,
    quant_type,
    resolve,
)
from backends.onnx.search_set import search_set

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]

CACHE_ENV = "NPUCTL_CACHE_DIR"
"""Optional persistent cache root when the engine passes no `cache_dir` input."""

_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


class _LogHandler(logging.Handler):
    def __init__(self, log: Logger) -> None:
        super().__init__(logging.INFO)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        self._log(f"onnxruntime: {record.getMessage()}")


@contextlib.contextmanager
def _ort_logging(log: Logger) -> Iterator[None]:
    """ONNX Runtime's quantizer warns through the root logger; those lines belong in the stage log."""
    root = logging.getLogger()
    handler = _LogHandler(log)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


class QuantizePass:
    """Stage "quantize"."""

    stage = "quantize"
    version = "3"  # 3: the auto search measures on the SLO's data and task metric (search_set)

    def fingerprint(self) -> dict[str, str]:
        return {name: _dist_version(name) for name in ("onnx", "onnxruntime", "numpy")}

    def policy(self, request: StageRequest) -> Policy:
        """The spec's policy on the target; a backend's pass adds its own quantizer options here."""
        return resolve(request.config, request.target)

    def run(self, request: StageRequest) -> StageOutput:
        log = StageLog(Path(request.log))
        policy = self.policy(request)
        log(f"quantize: mode {policy.mode} on target {request.target.id}")
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("quantize: no model given")
        out = Path(request.workdir) / "model.onnx"
        with _ort_logging(log):
            if policy.mode == "ptq":
                report = quantize_ptq(request, policy, out, log)
            elif policy.mode == "fp16":
                report = convert_fp16(Path(source), out, policy, request.target, log)
            elif policy.mode == "qat":
                report = validate_qat(Path(source), out, request.target, log)
            else:
                shutil.copyfile(source, out)
                report = {"mode": "none"}
        report["size_bytes"] = out.stat().st_size
        float_source = request.inputs.get("float_model", source)
        report["float_size_bytes"] = Path(float_source).stat().st_size
        report["size_ratio"] = round(report["size_bytes"] / max(1, report["float_size_bytes"]), 4)
        log(json.dumps(report, indent=1, sort_keys=True, default=str))
        return StageOutput(artifacts={"model": out}, report=report, note=_note(report))


def _note(report: Mapping[str, Any]) -> str:
    mode = report.get("mode")
    if mode == "ptq":
        pol = report["policy"]
        kept = report.get("kept_summary", {})
        cache = {"hit": "calibration reused", "miss": "calibrated now", "off": "calibrated, not cached"}.get(
            report["calibration"]["cache"], report["calibration"]["cache"]
        )
        kept_text = ", ".join(f"{v} {k}" for k, v in sorted(kept.items())) or "none kept"
        return (
            f"ptq w{pol['weights']}/a{pol['activations']}, {report['calibration']['samples_used']} samples "
            f"({cache}), {kept_text}{auto_search.note(report.get('auto'))}"
        )
    if mode == "fp16":
        return "fp16"
    if mode == "qat":
        return f"qat: {len(report.get('float_compute_ops', []))} compute ops left in float"
    return str(mode)


def save_deterministic(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString(deterministic=True))


# ---------------------------------------------------------------------------------------------- prepare


def _name_nodes(model: onnx.ModelProto) -> int:
    from backends.onnx.facts import name_nodes

    return name_nodes(model)


def prepare(source: Path, scratch: Path, log: Logger) -> tuple[Path, dict[str, Any]]:
    """The model every calibration and build starts from: opset >= 13 (per-channel QDQ needs it), named
    nodes, and ONNX Runtime's quant_pre_process (shape inference, BatchNorm folding, constant folding)."""
    import onnx

    from backends.onnx.importer import default_opset, raise_opset

    try:
        model = onnx.load(str(source))
    except Exception as exc:  # noqa: BLE001 - protobuf/onnx raise various types
        raise TerminalError(f"quantize: cannot load model: {one_line(exc)}") from exc
    report: dict[str, Any] = {"opset_before": default_opset(model)}
    model = raise_opset(model, log)
    report["opset"] = default_opset(model)
    report["renamed_nodes"] = _name_nodes(model)
    raised = scratch / "raised.onnx"
    save_deterministic(model, raised)
    prepared = scratch / "prepared.onnx"
    report["quant_pre_process"] = _pre_process(raised, prepared, log)
    model = onnx.load(str(prepared))
    renamed = _name_nodes(model)
    if renamed:
        report["renamed_nodes"] += renamed
    save_deterministic(model, prepared)
    report["nodes"] = len(model.graph.node)
    return prepared, report


def _pre_process(raised: Path, prepared: Path, log: Logger) -> str:
    """ONNX Runtime's quant_pre_process; its symbolic shape inference fails on some exported graphs
    (PP-OCR cls: an AssertionError), so it is retried with ONNX shape inference alone before giving up."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    failures = []
    for label, skip_symbolic in (("applied", False), ("applied without symbolic shape inference", True)):
        try:
            quant_pre_process(str(raised), str(prepared), skip_symbolic_shape=skip_symbolic)
            return label
        except Exception as exc:  # noqa: BLE001 - ORT's optimizer and shape inference raise plain exceptions
            failures.append(one_line(exc))
            log(f"quant_pre_process ({label}) failed: {one_line(exc)}")
    shutil.copyfile(raised, prepared)
    return f"skipped: {'; '.join(failures)}"


def op_types_to_quantize() -> list[str]:
    """Every op type ONNX Runtime's QDQ quantizer handles (its own default), in a stable order."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


# ------------------------------------------------------------------------------------------------ build


@dataclass
class Builder:
    """Builds QDQ models from the prepared model and the calibrated ranges, with some nodes kept."""

    prepared: Path
    ranges: Path
    policy: Policy
    scratch: Path
    op_types: list[str]
    counter: int = 0

    def build(
        self,
        float_nodes: Iterable[str] = (),
        int16_nodes: Iterable[str] = (),
        out: Path | None = None,
        explicit_activations: bool = False,
    ) -> Path:
        """`explicit_activations` keeps Relu/Clip nodes the quantizer would fold into Q ranges (same numbers):
        the sensitivity search bypasses Q/DQ pairs, which would otherwise drop their clipping."""
        import onnx
        from onnxruntime.quantization import QuantFormat, quantize_static

        self.counter += 1
        target = out or self.scratch / f"build-{self.counter}.onnx"
        extra: dict[str, Any] = {
            "ActivationSymmetric": self.policy.activation_symmetric,
            "WeightSymmetric": self.policy.weight_symmetric,
        }
        if explicit_activations:
            extra["QDQKeepRemovableActivations"] = True
        wide = sorted(set(int16_nodes))
        if wide:
            model = onnx.load(str(self.prepared))
            extra["TensorQuantOverrides"] = int16_overrides(model, wide, self.policy.wide_activations)
        if self.policy.backend_options:
            _merge_backend_options(extra, self.policy.backend_options, self.prepared)
        try:
            quantize_static(
                str(self.prepared),
                str(target),
                None,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=self.op_types,
                per_channel=self.policy.per_channel,
                reduce_range=False,
                activation_type=quant_type(self.policy.activations),
                weight_type=quant_type(self.policy.weights),
                nodes_to_exclude=sorted(set(float_nodes)),
                calibrate_method=calibration.ort_method(self.policy.method),
                extra_options=extra,
                calibration_cache_path=str(self.ranges),
            )
        except TerminalError:
            raise
        except Exception as exc:  # noqa: BLE001 - ORT's quantizer raises plain exceptions
            raise TerminalError(f"quantization failed: {one_line(exc)}") from exc
        model = onnx.load(str(target))
        save_deterministic(model, target)
        return target


def _merge_backend_options(extra: dict[str, Any], options: Mapping[str, Any], prepared: Path) -> None:
    """A backend's extra_options under the spec's: its tensor overrides only for tensors the prepared
    model still has (quant_pre_process folds some away), the spec's int16 keeps winning."""
    import onnx

    for key, value in options.items():
        if key != "TensorQuantOverrides":
            extra.setdefault(key, value)
            continue
        model = onnx.load(str(prepared), load_external_data=False)
        names = {t for n in model.graph.node for t in (*n.input, *n.output)}
        names |= {t.name for t in model.graph.initializer}
        kept = {k: v for k, v in dict(value).items() if k in names}
        extra[key] = {**kept, **extra.get(key, {})}


# ------------------------------------------------------------------------------------------------- ptq


def cache_root(inputs: Mapping[str, Path]) -> Path | None:
    """Where calibration ranges persist: the engine's `cache_dir` input, else $NPUCTL_CACHE_DIR."""
    given = inputs.get("cache_dir")
    if given is not None:
        return Path(given) / "calibration"
    env = os.environ.get(CACHE_ENV)
    return Path(env) / "quantize" / "calibration" if env else None


def quantize_ptq(request: StageRequest, policy: Policy, out: Path, log: Logger) -> dict[str, Any]:
    folder = request.inputs.get("calibration_data")
    if folder is None:
        raise TerminalError("quantization.calibration.data: ptq needs a calibration folder")
    source = Path(request.inputs["model"])
    reference = Path(request.inputs.get("float_model", source))
    cache_dir = cache_root(request.inputs)
    notes: list[str] = list(policy.notes)
    if cache_dir is None:
        notes.append(
            f"no cache folder (engine input cache_dir or ${CACHE_ENV}): calibration ranges not cached"
        )
    with tempfile.TemporaryDirectory(dir=request.workdir, prefix=".scratch-") as tmp:
        scratch = Path(tmp)
        prepared, prep = prepare(source, scratch, log)
        report: dict[str, Any] = {"mode": "ptq", "policy": policy.describe(), "prepare": prep}
        import onnx

        model = onnx.load(str(prepared))
        rules = policy.sensitive
        explicit = _match(model, source, rules) if rules is not None and rules.explicit else {}
        files = data.select_files(
            Path(folder), policy.samples, policy.seed, role="quantization.calibration.data"
        )
        ops = op_types_to_quantize()
        settings = calibration.Settings(policy.method, policy.percentile, policy.activation_symmetric)
        calib = calibration.calibrate(prepared, files, settings, ops, scratch, cache_dir)
        log(f"calibration: {calib.cache}, {len(calib.samples)} samples, digest {calib.digest[:16]}")
        report["calibration"] = calib.report()
        builder = Builder(prepared, calib.ranges, policy, scratch, ops)
        keep = rules.keep if rules is not None else "fp32"
        kept: dict[str, tuple[str, str]] = {name: (keep, rule) for name, rule in explicit.items()}

        def build(extra_layers: Sequence[sensitivity.Layer], explicit_activations: bool = False) -> Path:
            nodes = dict(kept)
            for layer in extra_layers:
                for name in layer.nodes:
                    nodes.setdefault(name, (keep, f"auto: layer {layer.name}"))
            wide = [n for n, (p, _) in nodes.items() if p == "int16"]
            flt = [n for n, (p, _) in nodes.items() if p in FLOAT_KEEPS]
            return builder.build(flt, wide, None, explicit_activations)

        chosen: list[sensitivity.Layer] = []
        if rules is not None and rules.auto is not None:
            measured_on = search_set(
                request.config, request.inputs, reference, files, auto_search.search_count(reference, files)
            )
            auto_report, chosen = auto_search.run(
                model, reference, measured_on, explicit, build, rules.auto, keep, scratch, log
            )
            report["auto"] = auto_report
        for layer in chosen:
            for name in layer.nodes:
                kept.setdefault(name, (keep, f"auto: layer {layer.name}"))
        built = build([])
        if keep == "fp16" and kept:
            built, fp16_note = keep_fp16(
                built, [n for n, (p, _) in kept.items() if p == "fp16"], request.target
            )
            notes.append(fp16_note)
        report["renamed_qdq_names"] = _save_compact(built, model, out)
        if "auto" in report:
            final = auto_search.final_score(out, reference, measured_on, log)
            report["auto"]["final"] = final
            # the artifact is what the SLO judges: "met" only when the final model (fp16 keeps and
            # all) is within the budget on the same data, not just the search's last candidate
            report["auto"]["final_within_budget"] = (
                final["drop"] <= report["auto"]["budget"]["max_accuracy_drop"]
            )
    report["kept"] = [{"node": n, "precision": p, "rule": r} for n, (p, r) in sorted(kept.items())]
    report["kept_summary"] = dict(Counter(p for p, _ in kept.values()))
    report["qdq_nodes"] = _qdq_counts(out)
    if notes:
        report["notes"] = notes
    return report


def _save_compact(built: Path, prepared: onnx.ModelProto, out: Path) -> int:
    """Writes the built model to `out` with the quantizer's own names shortened (qdq_names)."""
    import onnx

    from backends.onnx import qdq_names

    model = onnx.load(str(built))
    renamed = qdq_names.compact(model, qdq_names.source_names(prepared))
    save_deterministic(model, out)
    return renamed


def _match(model: onnx.ModelProto, source: Path, rules: Any) -> dict[str, str]:
    """Rules match the prepared model; a rule that matched only nodes pre-processing folded away says so."""
    import onnx

    try:
        return match_rules(model, rules)
    except TerminalError as exc:
        original = onnx.load(str(source))
        _name_nodes(original)
        try:
            match_rules(original, rules)
        except TerminalError:
            raise exc from None
        raise TerminalError(
            f"{exc} after ONNX Runtime's quant_pre_process (it folds BatchNormalization and constants "
            "into neighbouring nodes); name the remaining nodes instead"
        ) from None


def keep_fp16(built: Path, nodes: Sequence[str], target: Target) -> tuple[Path, str]:
    """Converts the kept (excluded) nodes of a QDQ model to fp16 when the target computes fp16 and the
    result still runs; otherwise they stay fp32, and the returned note says why."""
    if "fp16" not in target.precisions:
        return built, f"keep fp16: target {target.id} has no fp16; kept nodes stay fp32"
    if target.npu_cores == 0:
        return built, (
            f"keep fp16: target {target.id} runs the model on the CPU, where ONNX Runtime computes fp16 "
            "through fp32 casts; kept nodes stay fp32"
        )
    import onnx

    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(built))
        others = [n.name for n in model.graph.node if n.name not in set(nodes)]
        converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=others)
        out = built.with_name(built.stem + "-fp16.onnx")
        save_deterministic(converted, out)
        _smoke_run(out)
    except Exception as exc:  # noqa: BLE001 - converter and ORT raise various types
        return built, f"keep fp16: conversion not feasible ({one_line(exc)}); kept nodes stay fp32"
    return out, f"keep fp16: {len(nodes)} kept nodes converted to fp16"


def _smoke_run(model: Path) -> None:
    """Loads and runs the model once on random data: a converted model must at least execute."""
    from backends.onnx import accuracy

    inputs = data.model_inputs(model)
    accuracy.run_model(model, [data.random_feed(inputs, 0, 0)])


def _qdq_counts(model: Path) -> dict[str, int]:
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    counts = Counter(n.op_type for n in proto.graph.node if n.op_type in _QDQ_OPS)
    return dict(sorted(counts.items()))


# ------------------------------------------------------------------------------------------------ fp16


def convert_fp16(source: Path, out: Path, policy: Policy, target: Target, log: Logger) -> dict[str, Any]:
    """The whole model in fp16; I/O stays float32 when `keep_io_types` (the default)."""
    import onnx

    from backends.onnx.importer import raise_opset

    if "fp16" not in target.precisions:
        raise TerminalError(
            f"quantization.mode fp16: target {target.id} has no fp16 (its precisions: {', '.join(target.precisions)})"
        )
    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = raise_opset(onnx.load(str(source)), log)
        converted = convert_float_to_float16(model, keep_io_types=policy.keep_io_types)
    except TerminalError:
        raise
    except Exception as exc:  # noqa: BLE001 - the converter raises various types
        raise TerminalError(f"fp16 conversion failed: {one_line(exc)}") from exc
    save_deterministic(converted, out)
    report: dict[str, Any] = {"mode": "fp16", "keep_io_types": policy.keep_io_types}
    try:
        _smoke_run(out)
        report["runs_on_host"] = True
    except TerminalError as exc:
        report["runs_on_host"] = False
        report["notes"] = [f"the fp16 model does not run on the host ONNX Runtime: {exc}"]
    io = [
        {"name": v.name, "type": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()}
        for v in (*converted.graph.input, *converted.graph.output)
    ]
    report["io"] = io
    return report


# ------------------------------------------------------------------------------------------------- qat


def validate_qat(source: Path, out: Path, target: Target, log: Logger) -> dict[str, Any]:
    """Accepts a model that already carries QDQ nodes; reports every compute op left in float.

    A compute op is quantized when its activation and weight inputs come from DequantizeLinear. Ops left
    in float are a TerminalError on a target without float support, otherwise warnings."""
    import onnx

    model = onnx.load(str(source))
    nodes = list(model.graph.node)
    if not any(n.op_type in _QDQ_OPS for n in nodes):
        raise TerminalError("quantization.mode qat: the model has no QuantizeLinear/DequantizeLinear nodes")
    producer = {o: n for n in nodes for o in n.output}
    float_ops = []
    for node in nodes:
        if node.op_type not in COMPUTE_OPS:
            continue
        operands = [t for t in node.input[:2] if t]
        if not all(
            producer.get(t) is not None and producer[t].op_type == "DequantizeLinear" for t in operands
        ):
            float_ops.append({"node": node.name, "op_type": node.op_type})
    types = _qdq_types(model)
    unsupported = sorted(t for t in types if t not in target.precisions)
    if unsupported:
        raise TerminalError(
            f"quantization.mode qat: the model uses {', '.join(unsupported)}, which target {target.id} does not "
            f"support (its precisions: {', '.join(target.precisions)})"
        )
    compute = sum(1 for n in nodes if n.op_type in COMPUTE_OPS)
    if float_ops and not has_float(target):
        shown = ", ".join(f"{o['node']} ({o['op_type']})" for o in float_ops[:5])
        more = f" and {len(float_ops) - 5} more" if len(float_ops) > 5 else ""
        raise TerminalError(
            f"quantization.mode qat: target {target.id} runs no float layers, but {len(float_ops)} of {compute} "
            f"compute ops are not quantized: {shown}{more}"
        )
    shutil.copyfile(source, out)
    report: dict[str, Any] = {
        "mode": "qat",
        "compute_ops": compute,
        "float_compute_ops": float_ops,
        "quantized_types": sorted(types),
        "qdq_nodes": dict(sorted(Counter(n.op_type for n in nodes if n.op_type in _QDQ_OPS).items())),
    }
    if float_ops:
        report["warnings"] = [
            f"{len(float_ops)} of {compute} compute ops are left in float (see float_compute_ops)"
        ]
        log(report["warnings"][0])
    return report


def _qdq_types(model: onnx.ModelProto) -> set[str]:
    """Integer types carried by the model's Q/DQ nodes (from zero points or quantized initializers)."""
    import onnx

    names = {
        onnx.TensorProto.INT8: "int8",
        onnx.TensorProto.UINT8: "uint8",
        onnx.TensorProto.INT16: "int16",
        onnx.TensorProto.UINT16: "uint16",
        onnx.TensorProto.INT4: "int4",
        onnx.TensorProto.UINT4: "uint4",
    }
    inits = {t.name: t.data_type for t in model.graph.initializer}
    found: set[str] = set()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            for t in (node.input[2] if len(node.input) > 2 else "", node.input[0]):
                if t in inits and inits[t] in names:
                    found.add(names[inits[t]])
                    break
        elif node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in inits:
            dtype = inits[node.input[2]]
            if dtype in names:
                found.add(names[dtype])
    return found
