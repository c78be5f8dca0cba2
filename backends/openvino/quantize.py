"""OpenVINO's quantize stage: NNCF post-training quantization for mode ptq; other modes go to the
shared ONNX pass.

NNCF quantizes the ONNX model itself (its ONNX backend) and returns a QDQ ONNX model, so the quantize
artifact stays an ONNX file every later stage and the float-reference comparison can read, and the
compile stage reads it like any other. Sensitive layers become `nncf.IgnoredScope(names, patterns,
types, validate=True)`: glob patterns are translated to NNCF's regular expressions, and a rule that
matches nothing fails before calibration (the spec's contract and NNCF's `validate`). Calibration
samples come from the shared sample reader (backends.passes.data), exactly `calibration.samples` of them.
The preset follows the activation type: symmetric int8 activations are NNCF's PERFORMANCE preset,
asymmetric uint8 its MIXED preset. `calibration.method` maps onto NNCF's activation range estimator:
minmax -> MINMAX (min and max over all samples, as ONNX Runtime's MinMax), percentile p -> per-sample
quantiles at 1 - p/100 averaged over the samples (MEAN_QUANTILE's statistics); entropy has no NNCF
estimator. `sensitive_layers.keep: int16`, `auto` and entropy are refused by `validate`
(spec_errors) with the alternative, and again here.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.openvino import fingerprint
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line


def _estimator_text(method: str, percentile: float) -> str:
    if method == "minmax":
        return "NNCF MINMAX (min/max over all samples)"
    return f"NNCF per-sample quantile {1 - percentile / 100:.6g} outlier probability, averaged (MEAN)"


def ignored_scope_args(model: Any, rules: Any) -> dict[str, list[str]]:
    """names / patterns / types for nncf.IgnoredScope from the spec's sensitive-layer rules."""
    from backends.passes.quant.policy import compute_nodes

    names: list[str] = []
    patterns: list[str] = []
    node_names = {n.name for n in model.graph.node}
    for rule in rules.nodes:
        if rule in node_names:
            names.append(rule)
        else:
            patterns.append(
                fnmatch.translate(rule).removesuffix(r"\Z").removeprefix("(?s:").removesuffix(")") + "$"
            )
    compute = compute_nodes(model)
    if rules.first:
        names.extend(compute[: rules.first])
    if rules.last:
        names.extend(compute[-rules.last :])
    return {"names": sorted(set(names)), "patterns": patterns, "types": list(rules.op_types)}


def constants_as_initializers(model: Any) -> int:
    """Turns tensor-valued Constant nodes into initializers of the same name; how many. NNCF's ONNX
    backend reads a Conv's or Gemm's weight and bias as initializers ("There is no tensor with the
    name ..." otherwise), and exporters that inline functions or If branches write them as Constant
    nodes. The values and names are unchanged, so the model computes the same."""
    kept, moved = [], 0
    for node in model.graph.node:
        values = [a for a in node.attribute if a.name == "value"]
        if (
            node.op_type == "Constant"
            and node.domain in ("", "ai.onnx")
            and len(node.attribute) == 1
            and values
        ):
            tensor = model.graph.initializer.add()
            tensor.CopyFrom(values[0].t)
            tensor.name = node.output[0]
            moved += 1
        else:
            kept.append(node)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return moved


def spec_errors(section: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for what this NNCF path cannot do with the spec's quantization section."""
    if section.get("mode") != "ptq":
        return []
    found: list[tuple[str, str]] = []
    rules: Mapping[str, Any] = section.get("sensitive_layers") or {}
    if rules and rules.get("keep", "fp16") == "int16":
        found.append(
            (
                "quantization.sensitive_layers.keep",
                "openvino/nncf keeps layers in float (nncf.IgnoredScope), not at int16; use keep: fp16 or fp32",
            )
        )
    if rules.get("auto") is not None:
        found.append(
            (
                "quantization.sensitive_layers.auto",
                "openvino/nncf has no auto sensitive-layer search here; name the layers with nodes, op_types, "
                "first or last (kept float through nncf.IgnoredScope)",
            )
        )
    method = (section.get("calibration") or {}).get("method", "minmax")
    if method not in _METHODS:
        found.append(
            (
                "quantization.calibration.method",
                f"openvino/nncf has no {method} range estimator; use minmax (NNCF MINMAX) or percentile "
                "(NNCF per-sample quantiles)",
            )
        )
    return found


_METHODS = ("minmax", "percentile")


def range_estimator(method: str, percentile: float) -> Any:
    """NNCF's activation range estimator for the spec's calibration method."""
    from nncf.quantization.range_estimator import (
        AggregatorType,
        RangeEstimatorParameters,
        RangeEstimatorParametersSet,
        StatisticsCollectorParameters,
        StatisticsType,
    )

    if method == "minmax":
        return RangeEstimatorParametersSet.MINMAX
    prob = max(1e-12, 1.0 - percentile / 100.0)
    return RangeEstimatorParameters(
        min=StatisticsCollectorParameters(
            StatisticsType.QUANTILE, AggregatorType.MEAN, quantile_outlier_prob=prob
        ),
        max=StatisticsCollectorParameters(
            StatisticsType.QUANTILE, AggregatorType.MEAN, quantile_outlier_prob=prob
        ),
    )


class NncfQuantize:
    stage = "quantize"

    def fingerprint(self) -> dict[str, str]:
        from backends.passes.quant.stage import QuantizePass

        return {**fingerprint(), **{f"shared.{k}": v for k, v in QuantizePass().fingerprint().items()}}

    def run(self, request: StageRequest) -> StageOutput:
        section: Mapping[str, Any] = request.config.get("quantization") or {}
        if section.get("mode") != "ptq":
            from backends.passes.quant.stage import QuantizePass

            output = QuantizePass().run(request)
            output.report["quantizer"] = "onnxruntime (shared pass)"
            return output
        return self._nncf(request, section)

    def _nncf(self, request: StageRequest, section: Mapping[str, Any]) -> StageOutput:
        import nncf
        import onnx

        from backends.passes import data
        from backends.passes.quant import policy as quant_policy

        policy = quant_policy.resolve(request.config, request.target)
        if policy.weights != "int8" or policy.activations not in ("int8", "uint8"):
            raise TerminalError(
                f"openvino/nncf quantizes int8 weights with int8/uint8 activations; spec asks "
                f"weights {policy.weights}, activations {policy.activations}"
            )
        source, folder = request.inputs.get("model"), quant_policy.calibration_folder(request.inputs)
        if source is None:
            raise TerminalError("quantize: no model input")
        model = onnx.load(str(source), load_external_data=False)
        constants_as_initializers(model)
        rules = policy.sensitive
        refused = spec_errors(section)
        if refused:
            field, message = refused[0]
            raise TerminalError(f"{field}: {message}")
        scope_args = ignored_scope_args(model, rules) if rules is not None and rules.explicit else None
        inputs = data.model_inputs(model)
        samples = data.load_samples(
            Path(folder), inputs, policy.samples, policy.seed, "quantization.calibration.data"
        )
        dataset = nncf.Dataset([s.feed for s in samples])
        preset = (
            nncf.QuantizationPreset.PERFORMANCE
            if policy.activation_symmetric
            else nncf.QuantizationPreset.MIXED
        )
        kwargs: dict[str, Any] = {
            "subset_size": len(samples),
            "preset": preset,
            "target_device": nncf.TargetDevice.NPU,
        }
        if scope_args is not None:
            kwargs["ignored_scope"] = nncf.IgnoredScope(**scope_args, validate=True)
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            QuantizationParameters,
        )

        advanced: dict[str, Any] = {
            "activations_range_estimator_params": range_estimator(policy.method, policy.percentile)
        }
        if not policy.bias_correction:
            advanced["disable_bias_correction"] = True
        if not policy.per_channel:
            advanced["weights_quantization_params"] = QuantizationParameters(per_channel=False)
        kwargs["advanced_parameters"] = AdvancedQuantizationParameters(**advanced)
        request.log.parent.mkdir(parents=True, exist_ok=True)
        with request.log.open("a") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
            # NNCF draws progress bars and logs to the terminal; they belong in the stage log
            nncf.set_log_level(logging.WARNING)
            try:
                quantized = nncf.quantize(model, dataset, **kwargs)
            except nncf.ValidationError as exc:
                what = (
                    "quantization.sensitive_layers"
                    if scope_args is not None
                    else "nncf cannot quantize the model"
                )
                raise TerminalError(f"{what}: {one_line(exc)}") from exc
        out = request.workdir / "model.onnx"
        onnx.save(quantized, str(out))
        qdq = sum(1 for n in quantized.graph.node if n.op_type == "QuantizeLinear")
        report: dict[str, Any] = {
            "quantizer": f"nncf {fingerprint()['nncf']} (ONNX backend)",
            "policy": policy.describe(),
            "preset": preset.value,
            "range_estimator": _estimator_text(policy.method, policy.percentile),
            "ignored_scope": scope_args,
            "samples": len(samples),
            "quantize_nodes": qdq,
        }
        from backends.passes.quant import (
            check as quantize_check,  # the NNCF model against its float source, in ORT
        )

        files = data.select_files(Path(folder), policy.samples, policy.seed, "quantization.calibration.data")
        reference = Path(request.inputs.get("float_model", source))
        report["check"] = quantize_check.check(request, report, out, reference, files)
        with request.log.open("a") as fh:
            fh.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
        note = (
            f"nncf int8 ({preset.value}), {qdq} QuantizeLinear, {len(samples)} calibration samples, "
            f"calibration.method {policy.method} -> {report['range_estimator']}, NNCF bias correction "
            + ("on" if policy.bias_correction else "off (quantization.bias_correction false)")
        )
        return StageOutput(artifacts={"model": out}, report=report, note=note)
