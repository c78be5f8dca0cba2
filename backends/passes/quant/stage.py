"""The quantize stage: ptq (ONNX Runtime static QDQ), fp16, and validation of qat models.

ptq: the float model is prepared once (opset raised to >= 13, nodes named, ONNX Runtime's
quant_pre_process), its activation ranges come from `calibration` (cached by the digest of the exact
samples, model and method), and every model built from then on (the search's candidates and the
final artifact) reuses those ranges through `quantize_static(calibration_cache_path=...)`. Sensitive
layers are kept at the `keep` precision: fp32/fp16 by exclusion from quantization, int16 through
TensorQuantOverrides. `auto` adds layers chosen by measured sensitivity (backends.passes.quant.sensitivity).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes import data
from backends.passes.quant import (
    auto_search,
    calibration,
    channel_ranges,
    qdq_placement,
    recurrent,
    sensitivity,
)
from backends.passes.quant.modes import convert_fp16, keep_fp16, save_deterministic, validate_qat
from backends.passes.quant.policy import (
    FLOAT_KEEPS,
    Policy,
    calibration_folder,
    has_float,
    match_rules,
    resolve,
)
from backends.passes.quant.qdq_build import Builder, _name_nodes, op_types_to_quantize, prepare
from backends.passes.quant.search_set import search_set
from backends.passes.quantized import QDQ_OPS
from backends.sdk.base import StageLog, StageOutput, StageRequest
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx

    from backends.passes import accuracy

Logger = Callable[[str], None]

CACHE_ENV = "NPUCTL_CACHE_DIR"
"""Optional persistent cache root when the engine passes no `cache_dir` input."""


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
        from backends.passes.accuracy import host_kernels

        with _ort_logging(log), host_kernels(policy.host_kernels):
            if policy.mode == "ptq":
                report = quantize_ptq(request, policy, out, log)
            elif policy.mode == "fp16":
                report = convert_fp16(Path(source), out, policy, request.target, log)
                report["check"] = _fp16_check(request, report, Path(source), out)
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


def _fp16_check(request: StageRequest, report: Mapping[str, Any], source: Path, out: Path) -> dict[str, Any]:
    """The fp16 model against its float source, on the broken-model bound (fp16 has no budget)."""
    if not report.get("runs_on_host", True):
        return {"ran": False, "why": "the fp16 model does not run on the host ONNX Runtime"}
    from backends.passes.quant import check as quantize_check

    folder = request.inputs.get("calibration_data")
    files = data.sample_files(Path(folder)) if folder is not None else []
    reference = Path(request.inputs.get("float_model", source))
    return quantize_check.check(request, report, out, reference, files)


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
            + (f"; {qdq_placement.note(report['placement'])}" if "placement" in report else "")
            + (f"; recurrent: {recurrent.note(report['recurrent'])}" if report.get("recurrent") else "")
            + _bias_note(report.get("bias_correction"))
        )
    if mode == "fp16":
        return "fp16"
    if mode == "qat":
        return f"qat: {len(report.get('float_compute_ops', []))} compute ops left in float"
    return str(mode)


# ------------------------------------------------------------------------------------------------- ptq


def cache_root(inputs: Mapping[str, Path]) -> Path | None:
    """Where calibration ranges persist: the engine's `cache_dir` input, else $NPUCTL_CACHE_DIR."""
    given = inputs.get("cache_dir")
    if given is not None:
        return Path(given) / "calibration"
    env = os.environ.get(CACHE_ENV)
    return Path(env) / "quantize" / "calibration" if env else None


def quantize_ptq(request: StageRequest, policy: Policy, out: Path, log: Logger) -> dict[str, Any]:
    folder = calibration_folder(request.inputs)
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
        files = data.select_files(folder, policy.samples, policy.seed, role="quantization.calibration.data")
        ops = op_types_to_quantize()
        settings = calibration.Settings(policy.method, policy.percentile, policy.activation_symmetric)
        calib = calibration.calibrate(prepared, files, settings, ops, scratch, cache_dir)
        log(f"calibration: {calib.cache}, {len(calib.samples)} samples, digest {calib.digest[:16]}")
        report["calibration"] = calib.report()
        placement = qdq_placement.plan(
            model,
            calib.ranges,
            request.target,
            policy.placement,
            ops,
            policy.integer_graph,
            policy.wide_activations,
        )
        report["placement"] = placement.report()
        report["placement"]["channel_ranges"] = _channel_check(model, files, placement, request, policy)
        log(qdq_placement.note(report["placement"]))
        builder = Builder(
            prepared,
            calib.ranges,
            policy,
            scratch,
            placement.op_types,
            list(placement.float_nodes),
            placement.wide_tensors,
        )
        keep = rules.keep if rules is not None else "fp32"
        kept: dict[str, tuple[str, str]] = {name: (keep, rule) for name, rule in explicit.items()}
        float_outputs = None
        if policy.bias_correction:
            report["bias_correction"], float_outputs = _correct_biases(
                builder, kept, prepared, model, files, scratch
            )
            log(f"bias correction: {report['bias_correction']}")
        if not _same_file(reference, source):  # the probe ran the model quantized, not this reference
            float_outputs = None

        def build(
            extra_layers: Sequence[sensitivity.Layer],
            explicit_activations: bool = False,
            wide_tensors: Sequence[str] = (),
        ) -> Path:
            nodes = dict(kept)
            for layer in extra_layers:
                for name in layer.nodes:
                    nodes.setdefault(name, (keep, f"auto: layer {layer.name}"))
            wide = [n for n, (p, _) in nodes.items() if p == "int16"]
            flt = [n for n, (p, _) in nodes.items() if p in FLOAT_KEEPS]
            return builder.build(flt, wide, None, explicit_activations, wide_tensors)

        def finish(built: Path) -> Path:
            """What every search candidate gets after its Q/DQ build, as the final artifact does: the
            recurrent weights int8 (the OCR search once scored float LSTMs it never shipped)."""
            out_path = built.with_suffix(".recurrent.onnx")
            return recurrent.quantize_weights(
                built, out_path, request.target, policy.weights, None, policy.per_channel
            )[0]

        picked = auto_search.Chosen()
        if rules is not None and rules.auto is not None:
            measured_on = search_set(
                request.config, request.inputs, reference, files, auto_search.search_count(reference, files)
            )
            auto_report, picked = auto_search.run(
                model, reference, measured_on, explicit, build, rules.auto, keep, scratch, log, finish
            )
            report["auto"] = auto_report
        for layer in picked.layers:
            for name in layer.nodes:
                kept.setdefault(name, (keep, f"auto: layer {layer.name}"))
        built = _final_build(build, picked.points, keep, model, scratch)
        if "bias_correction" in report:  # the artifact's own count: layers a search kept float have none
            report["bias_correction"]["layers_corrected"] = builder.corrected
        if picked.points:
            report["kept_points"] = [
                {
                    "tensor": p.tensor,
                    "kind": p.kind,
                    "producer": p.producer,
                    "precision": _point_precision(keep),
                }
                for p in picked.points
            ]
        if keep == "fp16" and kept:
            built, fp16_note = keep_fp16(
                built, [n for n, (p, _) in kept.items() if p == "fp16"], request.target
            )
            notes.append(fp16_note)
        built, report["recurrent"] = recurrent.quantize_weights(
            built, scratch / "recurrent.onnx", request.target, policy.weights, log, policy.per_channel
        )
        report["renamed_qdq_names"] = _save_compact(built, model, out)
        if "auto" in report:
            final = auto_search.final_score(out, reference, measured_on, log, picked.scorer)
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
    from backends.passes.quant import (
        check as quantize_check,  # the artifact against its float source, before it is recorded
    )

    report["check"] = quantize_check.check(request, report, out, reference, files, float_outputs)
    return report


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths hold the same bytes (the engine stages each input at its own path, the float
    model and the model to quantize alike, even when they are one store object)."""
    import filecmp

    return a == b or filecmp.cmp(a, b, shallow=False)


def _bias_note(record: Mapping[str, Any] | None) -> str:
    if not record:
        return ""
    return (
        f"; bias corrected on {record['layers_corrected']} layers (mean shift of int8 against float, "
        f"{record['samples']} samples)"
    )


def _correct_biases(
    builder: Builder,
    kept: Mapping[str, tuple[str, str]],
    prepared: Path,
    model: onnx.ModelProto,
    files: Sequence[Path],
    scratch: Path,
) -> tuple[dict[str, Any], accuracy.ModelOutputs | None]:
    """Measures every layer's mean shift on the first build (the spec's own keeps float) and hands it to
    the builder, so each later build, search candidates and artifact alike, is corrected the same way.
    Also returns the float model's outputs on the check's samples, which the probe computed."""
    from backends.passes.quant import bias_correction
    from backends.passes.quant import check as quantize_check

    base = builder.build([n for n, (p, _) in kept.items() if p in FLOAT_KEEPS])
    specs = data.model_inputs(model)
    samples = [data.read_sample(p, specs) for p in files[: bias_correction.SAMPLES]]
    measured = bias_correction.measure(base, prepared, samples, scratch, keep=quantize_check.FEW)
    builder.shifts = measured.shifts
    summary = bias_correction.summary(builder.shifts, len(builder.shifts), len(samples))
    return summary, measured.reference


def _channel_check(
    model: onnx.ModelProto,
    files: Sequence[Path],
    placement: qdq_placement.Placement,
    request: StageRequest,
    policy: Policy,
) -> list[dict[str, Any]]:
    """The per-channel range check (backends.passes.quant.channel_ranges) on the first calibration samples."""
    specs = data.model_inputs(model)
    samples = [data.read_sample(p, specs) for p in files[: channel_ranges.SAMPLES]]
    float_ok = has_float(request.target) and not policy.integer_graph
    found = channel_ranges.check(model, samples, placement.op_types, placement.float_nodes, float_ok)
    return [s.as_dict() for s in found]


def _point_precision(keep: str) -> str:
    """Points are left unrounded (fp32) for float keeps: fp16 conversion covers whole layers only."""
    return "fp32" if keep in FLOAT_KEEPS else keep


def _final_build(
    build: Callable[..., Path], points: Sequence[Any], keep: str, model: onnx.ModelProto, scratch: Path
) -> Path:
    """The artifact as the search measured it: kept points left float in the build (or at 16 bits)."""
    if not points:
        return build([])
    if keep not in FLOAT_KEEPS:
        return build([], wide_tensors=[p.name for p in points])
    import onnx

    from backends.passes.quant import points as quant_points

    base = onnx.load(str(build([], explicit_activations=True)))
    weights = {t.name: t for t in model.graph.initializer}
    out = scratch / "final-points.onnx"
    out.write_bytes(quant_points.kept_float(base, points, weights))
    return out


def _save_compact(built: Path, prepared: onnx.ModelProto, out: Path) -> int:
    """Writes the built model to `out` with the quantizer's own names shortened (qdq_names)."""
    import onnx

    from backends.passes.quant import qdq_names

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


def _qdq_counts(model: Path) -> dict[str, int]:
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    counts = Counter(n.op_type for n in proto.graph.node if n.op_type in QDQ_OPS)
    return dict(sorted(counts.items()))
