"""The layer phase's last step: the model's input side kept float as one region, its size searched.

When no single layer helps measurably, the loss is spread over a stretch of the graph that only
helps when it is float as a whole. Measured on an OCR recognizer (CNN + LSTM + CTC, 50 tuning lines):
its 21 conv layers kept float one by one never beat noise; all 21 convs float but the residual Adds
between them still quantized scored 0.88, as did the 10 convs that hurt alone; the first 8 convs
with everything between them float scored 0.98 (0.47x float latency), the first 4 0.86. What keeps
the loss is the residual stream rounded at every block, so the unit is a prefix of the graph in
order: the first k compute layers with every node before them (the glue between: Adds, Concats).
Input-side layers are the ones whose error every later layer carries (PP-OCR det's search kept
mostly its high-resolution stem), and a prefix runs as one float partition before the int8 rest.

k doubles (2, 4, 8, ...) up to the layers left in the budget (never the whole model: then nothing is
int8); the first size that meets the budget is narrowed by bisection from the size below it, so the
region is as small as the measurements allow. Each size is a real build scored on the full search set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from backends.passes.quant import sensitivity

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]


def prefix(model: onnx.ModelProto, count: int, explicit: Mapping[str, str]) -> list[sensitivity.Layer]:
    """The first `count` compute layers in graph order, each with the nodes before it that belong to no
    layer (the glue between layers), less the nodes the spec already places itself."""
    nodes = [n.name for n in model.graph.node]
    index = {name: i for i, name in enumerate(nodes)}
    every = sensitivity.layers(model)
    in_layer = {name for layer in every for name in layer.nodes}
    end = index[every[count].name] if count < len(every) else len(nodes)
    out: list[sensitivity.Layer] = []
    start = 0
    for layer in every[:count]:
        head = index[layer.name]
        glue = [n for n in nodes[start:head] if n not in in_layer]
        out.append(sensitivity.Layer(layer.name, layer.op_type, (*glue, *layer.nodes)))
        start = head + 1
    tail = [n for n in nodes[start:end] if n not in in_layer]
    if out and tail:
        last = out[-1]
        out[-1] = sensitivity.Layer(last.name, last.op_type, (*last.nodes, *tail))
    return [sensitivity.Layer(x.name, x.op_type, tuple(n for n in x.nodes if n not in explicit)) for x in out]


def sizes(layers: int, left: int) -> list[int]:
    """2, 4, 8, ... up to `left`, below the model's layer count (a region of every layer is no int8)."""
    top = min(left, layers - 1)
    out, k = [], 2
    while k < top:
        out.append(k)
        k *= 2
    if top >= 1:
        out.append(top)
    return out


@dataclass
class RegionSearch:
    chosen: list[sensitivity.Layer] = field(default_factory=list)
    step: sensitivity.Step | None = None
    """The chosen region's measurement (the smallest meeting the budget, else the best scored)."""
    budget_met: bool = False
    trials: list[dict[str, float | int | str]] = field(default_factory=list)


def search(
    model: onnx.ModelProto,
    explicit: Mapping[str, str],
    build: Callable[[Sequence[sensitivity.Layer]], Path],
    scorer: sensitivity.Scorer,
    max_drop: float,
    left: int,
    log: Logger,
) -> RegionSearch:
    """Doubles the region until its drop is within `max_drop`, then bisects down to the smallest size
    that still meets it; without a size that meets it, the best scored region is returned unmet."""
    total = len(sensitivity.layers(model))
    found = RegionSearch()
    scores: dict[int, sensitivity.Score] = {}

    def measure(k: int) -> bool:
        region = prefix(model, k, explicit)
        got = scores[k] = scorer(build(region))
        drop = sensitivity.drop_of(scorer.reference_accuracy, got.accuracy)
        found.trials.append(
            {
                "layers": k,
                "up_to": region[-1].name,
                "accuracy": round(got.accuracy, 6),
                "drop": round(drop, 6),
            }
        )
        log(
            f"  region: first {k} layers float (up to {region[-1].name}) -> {scorer.metric} "
            f"{got.accuracy:.4f} (drop {drop:.4f})"
        )
        return drop <= max_drop

    below, met = 0, None
    for k in sizes(total, left):
        if measure(k):
            met = k
            break
        below = k
    if met is not None:
        while met - below > 1:
            mid = (below + met) // 2
            if measure(mid):
                met = mid
            else:
                below = mid
        return _chosen(found, model, explicit, met, scores[met], scorer, True)
    if scores:
        best = max(scores, key=lambda k: (scores[k].accuracy, -k))
        return _chosen(found, model, explicit, best, scores[best], scorer, False)
    return found


def _chosen(
    found: RegionSearch,
    model: onnx.ModelProto,
    explicit: Mapping[str, str],
    k: int,
    got: sensitivity.Score,
    scorer: sensitivity.Scorer,
    met: bool,
) -> RegionSearch:
    found.chosen = prefix(model, k, explicit)
    found.budget_met = met
    names = [layer.name for layer in found.chosen]
    drop = sensitivity.drop_of(scorer.reference_accuracy, got.accuracy)
    found.step = sensitivity.Step(names, f"region of the first {k} layers", got.accuracy, drop, got.sqnr_db)
    return found
