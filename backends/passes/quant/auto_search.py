"""The quantize stage's auto sensitive-layer search: every quantization point first (cheap signal,
confirmed by the task metric), whole layers by measured sensitivity when points are not enough, and
the input-side region as one block when single layers are not (backends.passes.quant.region_search); it
keeps greedily until the budget holds, and reports every number it used.

The budget is measured on a SearchSet (backends.passes.quant.search_set): the SLO's evaluation data, labels and
task when evaluate.data is set. The quantizer itself (the `build` callable) belongs to the quantize stage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes import data
from backends.passes.quant import point_search, region_search, sensitivity
from backends.passes.quant import points as quant_points
from backends.passes.quant.policy import FLOAT_KEEPS
from backends.passes.quant.search_set import SearchSet

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]

SCREEN_SAMPLES = sensitivity.MIN_SEARCH_SAMPLES
"""Samples a candidate is compared on first; only one that looks better is measured on the full set."""
COARSE_SAMPLES = 2
REFINE_EXTRA = 4


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
            f"; auto: budget met in the search with {chosen} kept, NOT by the final artifact: {auto['metric']} "
            f"drop {final['drop']:.4f} > {budget['max_accuracy_drop']} on {where}"
        )
    if auto["budget_met"]:
        return f"; auto: {chosen} kept ({_kinds(auto)}), budget met ({auto['metric']} drop <= {budget['max_accuracy_drop']} on {where})"
    drop = float(auto["steps"][-1]["drop"])
    return (
        f"; auto: budget NOT met with {chosen} kept ({_kinds(auto)}, max {budget['max_layers']}): {auto['metric']} "
        f"drop {drop:.4f} > {budget['max_accuracy_drop']} on {where}"
    )


@dataclass
class Chosen:
    """What the search keeps: quantization points (left unrounded in the build) and whole layers."""

    points: list[quant_points.Point] = field(default_factory=list)
    layers: list[sensitivity.Layer] = field(default_factory=list)
    scorer: sensitivity.Scorer | None = None
    """The search's scorer (its float outputs), for the final artifact's score on the same data."""


def _kinds(auto: Mapping[str, Any]) -> str:
    counts: dict[str, int] = {}
    for c in auto["chosen"]:
        kind = str(c.get("kind", "layer"))
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in sorted(counts.items())) or "nothing"


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
    finish: Callable[[Path], Path] = lambda built: built,
) -> tuple[dict[str, Any], Chosen]:
    """Phase 1 ranks every quantization point by its cheap signal and confirms each with the task
    metric (backends.passes.quant.point_search); when the budget still fails, phase 2 ranks whole layers by
    measured isolated sensitivity and keeps them greedily. Both judge on `measured_on`, each candidate
    as the final artifact will be: `finish` is the pass the artifact gets after its Q/DQ build."""
    import onnx

    started, cpu = time.perf_counter(), time.process_time()
    inputs = data.model_inputs(reference)
    samples, labels = measured_on.samples, measured_on.labels
    sensitivity.check_samples(samples)
    rank_n, _ = sensitivity.sample_counts(_elements(inputs), len(samples))
    search_scorer = sensitivity.Scorer(
        reference, samples, threads=sensitivity.THREADS, task=measured_on.task, labels=labels
    )
    log(f"auto: budget measured as {search_scorer.text} on {measured_on.describe()}")
    raw = build([], explicit_activations=True)
    base_path = finish(raw)
    base_model = onnx.load(str(base_path))
    weights = {t.name: t for t in model.graph.initializer}
    found = [
        p for p in quant_points.points(base_model) if keep in FLOAT_KEEPS or p.kind == quant_points.ACTIVATION
    ]
    ordered = sorted(
        quant_points.signals(base_model, model, weights, found, samples[:rank_n]),
        key=lambda s: (s.sqnr_db, -s.range_ratio, s.point.name),
    )
    log(
        f"auto: ranking {len(ordered)} quantization points ({len(found)} found) by rounding SQNR on {rank_n} samples"
    )

    def with_points(points: Sequence[quant_points.Point], layers: Sequence[sensitivity.Layer] = ()) -> bytes:
        if keep in FLOAT_KEEPS:
            if not layers:
                return quant_points.kept_float(base_model, points, weights)
            source = onnx.load(str(finish(build(list(layers), explicit_activations=True))))
            return quant_points.kept_float(source, points, weights)
        return finish(build(list(layers), wide_tensors=[p.name for p in points])).read_bytes()

    base = search_scorer(base_path)
    log(
        f"auto: point search on {len(samples)} samples, budget drop <= {budget.max_accuracy_drop} "
        f"(float {search_scorer.reference_accuracy:.4f}), at most {budget.max_layers} kept"
    )
    phase1 = point_search.search(
        ordered,
        with_points,
        search_scorer,
        base,
        budget.max_accuracy_drop,
        budget.max_layers,
        scratch,
        log,
        screen=_screen(search_scorer),
    )
    chosen = Chosen(list(phase1.chosen), scorer=search_scorer)
    steps = [
        sensitivity.Step(
            [],
            None,
            base.accuracy,
            sensitivity.drop_of(search_scorer.reference_accuracy, base.accuracy),
            base.sqnr_db,
        ).as_dict(),
        *phase1.steps,
    ]
    report: dict[str, Any] = {
        "keep": keep,
        "ranking": (
            "every quantization point (activation Q/DQ pair, weight) ordered by the SQNR of its own rounding "
            "(worst concatenated slice first), each confirmed by the task metric with it left float"
        ),
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
        "samples": {"rank": rank_n, "search": len(samples)},
        "budget": {"max_accuracy_drop": budget.max_accuracy_drop, "max_layers": budget.max_layers},
        "table": point_search.table(ordered, phase1.trials),
        "points_measured": len(phase1.trials),
    }
    log(point_search.format_table(report["table"], search_scorer.metric))
    left = budget.max_layers - len(chosen.points)
    if not phase1.budget_met and left > 0:
        layer_report, layers = _layer_phase(
            model,
            search_scorer,
            explicit,
            build,
            budget,
            left,
            chosen.points,
            with_points,
            phase1.score,
            raw,
            scratch,
            log,
        )
        report["layers"] = layer_report
        chosen.layers = list(layers.chosen)
        steps.extend(s.as_dict() for s in layers.steps[1:])
        met = layers.budget_met
        if not met and _fall_back_to_group(phase1, layers, chosen, log):
            group, got = phase1.best_group or ([], phase1.score)
            report["fallback"] = (
                f"budget not met by either phase: kept the bulk step's best group of {len(group)} "
                "points, which scored above the layer phase's end, instead of its layers"
            )
            steps.append(
                {
                    "added": f"{len(group)} points (bulk, best below the budget)",
                    "kept": [p.label for p in chosen.points],
                    "accuracy": round(got.accuracy, 6),
                    "drop": round(search_scorer.reference_accuracy - got.accuracy, 6),
                    "sqnr_db": round(got.sqnr_db, 3),
                }
            )
    else:
        met = phase1.budget_met
    report["steps"] = steps
    layer_kind = "region layer" if (report.get("layers") or {}).get("region", {}).get("kept") else "layer"
    report["chosen"] = [
        *({"layer": p.label, "kind": p.kind, "nodes": []} for p in chosen.points),
        *({"layer": layer.name, "kind": layer_kind, "nodes": list(layer.nodes)} for layer in chosen.layers),
    ]
    report["budget_met"] = met
    log(  # the log, not the (locked) report: CPU time is the process's, ONNX Runtime's threads included
        f"auto: search done in {time.perf_counter() - started:.1f} s (CPU {time.process_time() - cpu:.1f} s)"
    )
    return report, chosen


def _layer_phase(
    model: onnx.ModelProto,
    search_scorer: sensitivity.Scorer,
    explicit: Mapping[str, str],
    build: Callable[..., Path],
    budget: Any,
    left: int,
    points: Sequence[quant_points.Point],
    with_points: Callable[..., bytes],
    base: sensitivity.Score,
    raw: Path,
    scratch: Path,
    log: Logger,
) -> tuple[dict[str, Any], sensitivity.Search]:
    """Whole layers ranked by isolated sensitivity, kept greedily on top of the kept points: every
    layer on COARSE_SAMPLES, the 2 * left + REFINE_EXTRA least precise re-measured on the ranking
    samples (a layer that matters sits 10-20 dB below the rest on a 320x320 detector: two samples
    tell them apart, more order them). When that misses the budget, the input-side region is searched
    as one block and replaces the greedy layers if it meets the budget or scores above them."""
    inputs = data.model_inputs(search_scorer.reference_model)
    rank_n, _ = sensitivity.sample_counts(_elements(inputs), len(search_scorer.samples))
    rank_scorer = search_scorer.subset(rank_n)
    coarse_scorer = search_scorer.subset(min(rank_n, COARSE_SAMPLES))
    candidates = [layer for layer in sensitivity.layers(model) if not any(n in explicit for n in layer.nodes)]
    refine = 2 * left + REFINE_EXTRA
    log(
        f"auto: budget not met by points; ranking {len(candidates)} layers on {len(coarse_scorer.samples)} "
        f"samples, the {refine} least precise again on {rank_n} ({rank_scorer.metric})"
    )
    qdq = raw  # the base build before `finish`: each layer alone, its own Q/DQ noise only
    ranked = sensitivity.rank(qdq, model, candidates, coarse_scorer, scratch, log)
    if rank_scorer is not coarse_scorer and len(ranked) > 0:
        top = [r.layer for r in ranked[:refine]]
        ranked = [*sensitivity.rank(qdq, model, top, rank_scorer, scratch, log), *ranked[refine:]]
    table = sensitivity.ranked_table(ranked)
    log(sensitivity.format_table(table, rank_scorer.metric))
    counter = iter(range(1 << 30))

    def build_layers(layers: Sequence[sensitivity.Layer]) -> Path:
        path = scratch / f"layers-{next(counter)}.onnx"
        path.write_bytes(with_points(points, layers))
        return path

    search = sensitivity.greedy(
        ranked,
        build_layers,
        search_scorer,
        base,
        budget.max_accuracy_drop,
        left,
        reference_accuracy=search_scorer.reference_accuracy,
        log=log,
    )
    report: dict[str, Any] = {}
    if not search.budget_met:
        log(f"auto: budget not met by single layers; the input-side region, up to {left} layers, as one")
        region = region_search.search(
            model, explicit, build_layers, search_scorer, budget.max_accuracy_drop, left, log
        )
        report["region"] = {"trials": region.trials, "budget_met": region.budget_met}
        preferred = _prefer_region(search, region)
        if preferred is not None:
            search = preferred
            report["region"]["kept"] = len(region.chosen)
    return {
        **report,
        "ranking": (
            f"each layer quantized alone (all other nodes float), ranked by output SQNR, lowest first: "
            f"every layer on {len(coarse_scorer.samples)} samples, the {refine} lowest again on {rank_n}"
        ),
        "table": table,
    }, search


def _prefer_region(
    search: sensitivity.Search, region: region_search.RegionSearch
) -> sensitivity.Search | None:
    """The region replaces the greedy layers when it meets the budget, or, unmet, scores above where
    the greedy search ended (the artifact is the best measured); its step is appended to the steps."""
    if region.step is None:
        return None
    ended = search.steps[-1].accuracy if search.steps else float("-inf")
    if not region.budget_met and region.step.accuracy <= ended:
        return None
    return sensitivity.Search(list(region.chosen), [*search.steps, region.step], region.budget_met)


def _fall_back_to_group(
    phase1: point_search.PointSearch, layers: sensitivity.Search, chosen: Chosen, log: Logger
) -> bool:
    """When neither phase met the budget, the best candidate measured is the artifact: the bulk step's
    best group (kept points + group) when it scored above where the layer phase ended."""
    if phase1.best_group is None:
        return False
    group, got = phase1.best_group
    ended = layers.steps[-1].accuracy if layers.steps else phase1.score.accuracy
    if got.accuracy <= ended:
        return False
    log(
        f"auto: budget not met; the bulk group of {len(group)} points ({got.accuracy:.4f}) beats the "
        f"layer phase's end ({ended:.4f}): kept instead of its layers"
    )
    chosen.points = [*chosen.points, *group]
    chosen.layers = []
    return True


def _screen(scorer: sensitivity.Scorer) -> sensitivity.Scorer | None:
    """The first SCREEN_SAMPLES of the search set, when that is fewer than all of them."""
    return scorer.subset(SCREEN_SAMPLES) if len(scorer.samples) > SCREEN_SAMPLES else None


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


def final_score(
    model: Path,
    reference: Path,
    measured_on: SearchSet,
    log: Logger,
    scorer: sensitivity.Scorer | None = None,
) -> dict[str, Any]:
    """The final artifact on the search's data; `scorer`: the search's own (reuses its float outputs)."""
    if scorer is None:
        scorer = sensitivity.Scorer(
            reference,
            measured_on.samples,
            threads=sensitivity.THREADS,
            task=measured_on.task,
            labels=measured_on.labels,
        )
    got = scorer(model)
    drop = sensitivity.drop_of(scorer.reference_accuracy, got.accuracy)
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
