"""The quantize stage's auto sensitive-layer search: rank every layer by measured sensitivity, keep the
most sensitive in float greedily until the budget holds, and report every number it used.

The budget is measured on a SearchSet (backends.onnx.search_set): the SLO's evaluation data, labels and
task when evaluate.data is set. The quantizer itself (the `build` callable) belongs to the quantize stage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.onnx import data, sensitivity
from backends.onnx.search_set import SearchSet

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]


def note(auto: Mapping[str, Any] | None) -> str:
    """The auto search's outcome in a few words: a budget it could not meet must be seen in `apply`."""
    if not auto:
        return ""
    budget = auto["budget"]
    chosen = len(auto["chosen"])
    where = (auto.get("data") or {}).get("text", "calibration samples")
    final = auto.get("final") or {}
    if auto["budget_met"] and final.get("drop", 0.0) > budget["max_accuracy_drop"]:
        return (
            f"; auto: budget met in the search with {chosen} layers, NOT by the final artifact: {auto['metric']} "
            f"drop {final['drop']:.4f} > {budget['max_accuracy_drop']} on {where}"
        )
    if auto["budget_met"]:
        return f"; auto: {chosen} layers kept, budget met ({auto['metric']} drop <= {budget['max_accuracy_drop']} on {where})"
    drop = float(auto["steps"][-1]["drop"])
    return (
        f"; auto: budget NOT met with {chosen} layers (max {budget['max_layers']}): {auto['metric']} "
        f"drop {drop:.4f} > {budget['max_accuracy_drop']} on {where}"
    )


def run(
    model: onnx.ModelProto,
    reference: Path,
    measured_on: SearchSet,
    explicit: Mapping[str, str],
    build: Callable[..., Path],
    budget: Any,
    keep: str,
    scratch: Path,
    log: Logger,
) -> tuple[dict[str, Any], list[sensitivity.Layer]]:
    """Ranks every layer by measured sensitivity, then keeps the most sensitive greedily; the budget is
    judged on `measured_on` (the SLO's data and metric when evaluate.data is set)."""
    inputs = data.model_inputs(reference)
    samples, labels = measured_on.samples, measured_on.labels
    sensitivity.check_samples(samples)
    rank_n, _ = sensitivity.sample_counts(_elements(inputs), len(samples))
    rank_labels = labels[:rank_n] if labels is not None else None
    rank_scorer = sensitivity.Scorer(reference, samples[:rank_n], task=measured_on.task, labels=rank_labels)
    search_scorer = sensitivity.Scorer(reference, samples, task=measured_on.task, labels=labels)
    candidates = [layer for layer in sensitivity.layers(model) if not any(n in explicit for n in layer.nodes)]
    base_model = build([], explicit_activations=True)
    log(f"auto: budget measured as {search_scorer.text} on {measured_on.describe()}")
    log(
        f"auto: ranking {len(candidates)} layers on {len(rank_scorer.samples)} samples ({rank_scorer.metric})"
    )
    ranked = sensitivity.rank(base_model, model, candidates, rank_scorer, scratch, log)
    table = sensitivity.ranked_table(ranked)
    log(sensitivity.format_table(table, rank_scorer.metric))
    base = search_scorer(build([]))
    log(
        f"auto: greedy search on {len(samples)} samples, budget drop <= {budget.max_accuracy_drop} "
        f"(float {search_scorer.reference_accuracy:.4f}), at most {budget.max_layers} layers"
    )
    search = sensitivity.greedy(
        ranked,
        lambda layers: build(list(layers)),
        search_scorer,
        base,
        budget.max_accuracy_drop,
        budget.max_layers,
        reference_accuracy=search_scorer.reference_accuracy,
        log=log,
    )
    report = {
        "keep": keep,
        "ranking": "each layer quantized alone (all other nodes float), ranked by output SQNR, lowest first",
        "metric": search_scorer.metric,
        "measure": search_scorer.text,
        "data": {
            "source": measured_on.source,
            "samples": len(samples),
            "labels": labels is not None,
            "slo_data": measured_on.slo_data,
            "of": measured_on.of,
            "text": measured_on.describe(),
        },
        "reference_accuracy": round(search_scorer.reference_accuracy, 6),
        "samples": {"rank": len(rank_scorer.samples), "search": len(samples)},
        "budget": {"max_accuracy_drop": budget.max_accuracy_drop, "max_layers": budget.max_layers},
        "table": table,
        "steps": [s.as_dict() for s in search.steps],
        "chosen": [{"layer": layer.name, "nodes": list(layer.nodes)} for layer in search.chosen],
        "budget_met": search.budget_met,
    }
    return report, list(search.chosen)


def _elements(inputs: Sequence[data.InputSpec]) -> int:
    total = 0
    for spec in inputs:
        n = 1
        for d in spec.shape:
            n *= d
        total += n
    return total


def search_count(reference: Path, files: Sequence[Path]) -> int:
    """Calibration samples the search measures on when there is no evaluation set."""
    return sensitivity.sample_counts(_elements(data.model_inputs(reference)), len(files))[1]


def final_score(model: Path, reference: Path, measured_on: SearchSet, log: Logger) -> dict[str, Any]:
    scorer = sensitivity.Scorer(
        reference, measured_on.samples, task=measured_on.task, labels=measured_on.labels
    )
    got = scorer(model)
    drop = scorer.reference_accuracy - got.accuracy
    log(
        f"auto: final artifact {scorer.metric} {got.accuracy:.4f} (drop {drop:.4f}), sqnr {got.sqnr_db:.2f} dB"
    )
    return {
        "metric": scorer.metric,
        "accuracy": round(got.accuracy, 6),
        "reference": round(scorer.reference_accuracy, 6),
        "drop": round(drop, 6),
        "sqnr_db": round(got.sqnr_db, 3),
    }
