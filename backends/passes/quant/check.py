"""The quantize stage's check of its artifact against the float model it came from, before it is
recorded: both are scored with the one accuracy implementation (backends.passes.quant.sensitivity.Scorer, what
evaluate and the SLOs use), and a drop beyond the quantization's own budget fails the stage.

The budget is the quantization's own, never the SLO's:
- `quantization.sensitive_layers.auto.max_accuracy_drop` when the spec states one. The auto search has
  already scored the final artifact on its data (evaluate.data with its labels and task, or a stated
  split of it): that score is the check, not recomputed.
- otherwise BROKEN_DROP, on the first FEW calibration samples against the float model with the
  measure the outputs imply (random inputs, seed 0, with the generic measure when the stage has no
  calibration data, as fp16 has not). This is not a quality bar (the accuracy SLO is that, on the
  evaluation set); it catches a quantizer or calibration that broke the model (blank calibration
  images, one 8-bit scale over boxes and scores) before evaluate would report it as an accuracy drop.
Every quantizer that writes an ONNX model calls `check` (ONNX Runtime's ptq and fp16, NNCF's ptq);
RKNN, whose int8 exists only after its compile build, calls `require` on its simulator's outputs.
A failed check is a terminal quantize error (the same inputs quantize the same way) in one line naming
both scores, the measure, the data, the budget and what to change; a check that cannot run says so in
the report. An auto search that could not meet its budget fails the stage the same way: its artifact
would be recorded as a quantization that missed the user's own bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    from backends.passes.accuracy import ModelOutputs

BROKEN_DROP = 0.5
"""Without a stated budget: more than half of the measure lost against the float model."""
FEW = 16
"""Calibration samples the check scores on when there is no auto search (a gross bound needs few)."""


def check(
    request: Any,
    report: Mapping[str, Any],
    quantized: Path,
    reference: Path,
    calibration: Sequence[Path] = (),
    float_outputs: ModelOutputs | None = None,
) -> dict[str, Any]:
    """The check's record for the stage report; raises TerminalError when the drop exceeds the budget.
    `float_outputs`: `reference`'s outputs on the first FEW `calibration` samples, where the stage has
    them already (bias correction's probe): the float model is not run again."""
    auto = report.get("auto")
    if auto and auto.get("final"):
        final = auto["final"]
        budget = float(auto["budget"]["max_accuracy_drop"])
        record = {
            "metric": final["metric"],
            "quantized": final["accuracy"],
            "float": final["reference"],
            "drop": final["drop"],
            "data": (auto.get("data") or {}).get("text", "the auto search's samples"),
            "budget": budget,
            "budget_from": "quantization.sensitive_layers.auto.max_accuracy_drop",
        }
    else:
        found = _score(request, quantized, reference, calibration, float_outputs)
        record = {**found, "budget": BROKEN_DROP, "budget_from": "a broken model (no budget stated)"}
    return require(record, "quantize: the quantized model", _advice(auto), request.log)


def require(record: dict[str, Any], what: str, advice: str, log: Any) -> dict[str, Any]:
    """`record` (metric, quantized, float, drop, data, budget, budget_from) marked passed or not; a
    TerminalError in one line when the drop exceeds the budget. Shared by every quantizer's check."""
    record["ran"] = True
    record["passed"] = record["drop"] <= record["budget"]
    if not record["passed"]:
        raise TerminalError(
            f"{what} scores {record['quantized']:.6g} where its float source scores "
            f"{record['float']:.6g} ({record['metric']} on {record['data']}): drop {record['drop']:.6g} > "
            f"{record['budget']:g}, the budget of {record['budget_from']}; {advice}; log {log}"
        )
    return record


def _advice(auto: Mapping[str, Any] | None) -> str:
    """What the user can change, from what the search already used."""
    if not auto:
        return (
            "check the calibration data and quantization.calibration.method, or keep the damaged layers "
            "(quantization.sensitive_layers)"
        )
    kept, budget = len(auto.get("chosen", ())), auto["budget"]
    wider = "" if auto.get("keep", "fp32") == "fp32" else f", keep: fp32 instead of {auto['keep']}"
    return (
        f"the search kept {kept} of at most {budget['max_layers']}: raise "
        f"quantization.sensitive_layers.auto.max_layers or max_accuracy_drop{wider}, or name the damaged "
        "layers in sensitive_layers"
    )


def _score(
    request: Any,
    quantized: Path,
    reference: Path,
    calibration: Sequence[Path],
    float_outputs: ModelOutputs | None = None,
) -> dict[str, Any]:
    from backends.passes import data
    from backends.passes.quant import sensitivity
    from backends.passes.quant.search_set import search_set

    files = list(calibration)[:FEW]
    if files:
        no_eval = {k: v for k, v in request.inputs.items() if k not in ("eval_data", "labels")}
        measured_on = search_set(request.config, no_eval, reference, files, len(files))
        known = float_outputs if float_outputs and len(float_outputs.values) == len(files) else None
        scorer = sensitivity.Scorer(
            reference, measured_on.samples, task=measured_on.task, labels=measured_on.labels, reference=known
        )
        where = f"the first {len(files)} calibration samples against the float model"
    else:
        samples = data.random_samples(data.model_inputs(reference), FEW, seed=0)
        scorer = sensitivity.Scorer(reference, samples)
        where = f"{FEW} random inputs (seed 0, no calibration data) against the float model"
    got = scorer(quantized)
    return {
        "metric": scorer.metric,
        "quantized": round(got.accuracy, 6),
        "float": round(scorer.reference_accuracy, 6),
        "drop": round(scorer.reference_accuracy - got.accuracy, 6),
        "data": where,
    }
