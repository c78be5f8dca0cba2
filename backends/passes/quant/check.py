"""The quantize stage's check of its artifact against the float model it came from, before it is
recorded: both are scored with the one accuracy implementation (backends.passes.quant.sensitivity.Scorer, what
evaluate and the SLOs use), and a drop beyond the quantization's own budget fails the stage.

The budget is the quantization's own, never the SLO's:
- `quantization.sensitive_layers.auto.max_accuracy_drop` when the spec states one. The auto search has
  already scored the final artifact on its data (evaluate.data with its labels and task, or a stated
  split of it): that score is the check, not recomputed.
- otherwise BROKEN_DROP, on the first FEW calibration samples against the float model with the
  measure the outputs imply (random inputs, seed 0, with the generic measure when the stage has no
  calibration data, as fp16 has not). The first FIRST of them are scored first: a drop within half
  the budget passes on them; a closer one, and every failure, is decided on all FEW. This is not a
  quality bar (the accuracy SLO is that, on the evaluation set); it catches a quantizer or
  calibration that broke the model (blank calibration images, one 8-bit scale over boxes and scores)
  before evaluate would report it as an accuracy drop.
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
"""Calibration samples the check scores on when there is no auto search, at most (a gross bound needs
few)."""
FIRST = 8
"""The samples scored first. A healthy build is the common case and a broken one loses far more than
half of the measure: only a drop near the budget needs the other samples to decide."""


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
    return require(record, "quantize: the quantized model", advice(auto), request.log)


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


def advice(auto: Mapping[str, Any] | None = None) -> str:
    """What the user can change about a refused int8 build, from what the search already used (every
    path's refusal says it the same way)."""
    if not auto:
        return (
            "check the calibration data and quantization.calibration.method, or keep the damaged layers "
            "in float: name them in quantization.sensitive_layers, or let "
            "quantization.sensitive_layers.auto find them within a budget"
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
    from backends.passes.quant.search_set import search_set

    files = list(calibration)[:FEW]
    if files:
        no_eval = {k: v for k, v in request.inputs.items() if k not in ("eval_data", "labels")}
        measured_on = search_set(request.config, no_eval, reference, files, len(files))
        known = float_outputs if float_outputs and len(float_outputs.values) == len(files) else None
        samples, task, labels = measured_on.samples, measured_on.task, measured_on.labels
        where = "the first {n} calibration samples against the float model"
    else:
        samples = data.random_samples(data.model_inputs(reference), FEW, seed=0)
        known, task, labels = None, None, None
        where = "{n} random inputs (seed 0, no calibration data) against the float model"
    scored = _sequential(quantized, reference, samples, task, labels, known)
    return {**scored, "data": where.format(n=scored.pop("samples"))}


def _sequential(
    quantized: Path,
    reference: Path,
    samples: Sequence[Any],
    task: Any,
    labels: Sequence[Any] | None,
    known: ModelOutputs | None,
) -> dict[str, Any]:
    """The drop on the first FIRST samples when it is within half of BROKEN_DROP, else on all of them;
    the float model's outputs from `known` where given, else run here (each sample once)."""
    from backends.passes import accuracy
    from backends.passes.quant.sensitivity import THREADS, Scorer

    def scorer(n: int, ref: ModelOutputs | None) -> Scorer:
        cut = None if labels is None else list(labels)[:n]
        return Scorer(reference, list(samples)[:n], THREADS, task, cut, ref)

    def part(outputs: ModelOutputs | None, n: int) -> ModelOutputs | None:
        return None if outputs is None else accuracy.ModelOutputs(outputs.names, outputs.values[:n])

    first = scorer(FIRST, part(known, FIRST))
    ours = accuracy.run_model(quantized, first.samples, THREADS)
    got, used = first.score(ours), first
    if first.reference_accuracy - got.accuracy > BROKEN_DROP / 2 and len(samples) > len(first.samples):
        rest = list(samples)[len(first.samples) :]
        theirs = known or accuracy.ModelOutputs(
            first.reference.names,
            first.reference.values + accuracy.run_model(reference, rest, THREADS).values,
        )
        used = scorer(len(samples), theirs)
        ours = accuracy.ModelOutputs(
            ours.names, ours.values + accuracy.run_model(quantized, rest, THREADS).values
        )
        got = used.score(ours)
    return {
        "metric": used.metric,
        "quantized": round(got.accuracy, 6),
        "float": round(used.reference_accuracy, 6),
        "drop": round(used.reference_accuracy - got.accuracy, 6),
        "samples": len(used.samples),
    }
