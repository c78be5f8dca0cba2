"""When neither phase of the auto search meets the budget, the artifact is the best candidate it
measured: the bulk step's best group beats a layer phase that ended lower (on an OCR recognizer the
bulk step read 0.96 and the layer phase ended at 0.82, which was shipped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from quant_helpers import ptq_config, run_quantize

from backends.passes.quant import auto_search, point_search, region_search, sensitivity
from backends.passes.quant.points import Point
from backends.passes.quant.sensitivity import Layer, Score, Step
from tests.backends.tasks.task_models import segmenter, segmenter_feeds


def _points(*names: str) -> list[Point]:
    return [Point(n, "activation", "Conv", f"q{n}") for n in names]


def test_the_best_bulk_group_replaces_a_lower_layer_phase() -> None:
    phase1 = point_search.PointSearch(score=Score(0.92, 18.0), chosen=_points("a"))
    phase1.best_group = (_points("b", "c", "d", "e"), Score(0.96, 20.4))
    layers = sensitivity.Search(
        chosen=[Layer("Conv_8", "Conv", ("Conv_8",))],
        steps=[Step([], None, 0.92, 0.08, 18.0), Step(["Conv_8"], "Conv_8", 0.94, 0.06, 19.0)],
    )
    chosen = auto_search.Chosen(list(phase1.chosen), list(layers.chosen))
    assert auto_search._fall_back_to_group(phase1, layers, chosen, lambda _m: None)
    assert [p.name for p in chosen.points] == ["a", "b", "c", "d", "e"] and chosen.layers == []


def test_a_layer_phase_that_ended_higher_is_kept() -> None:
    phase1 = point_search.PointSearch(score=Score(0.92, 18.0), chosen=_points("a"))
    phase1.best_group = (_points("b", "c"), Score(0.94, 19.0))
    layers = sensitivity.Search(
        chosen=[Layer("Conv_8", "Conv", ("Conv_8",))],
        steps=[Step([], None, 0.92, 0.08, 18.0), Step(["Conv_8"], "Conv_8", 0.95, 0.05, 19.0)],
    )
    chosen = auto_search.Chosen(list(phase1.chosen), list(layers.chosen))
    assert not auto_search._fall_back_to_group(phase1, layers, chosen, lambda _m: None)
    assert [p.name for p in chosen.points] == ["a"] and [x.name for x in chosen.layers] == ["Conv_8"]
    nothing = point_search.PointSearch(score=Score(0.92, 18.0))
    assert not auto_search._fall_back_to_group(nothing, layers, chosen, lambda _m: None)


def _greedy_ended_at(accuracy: float) -> sensitivity.Search:
    return sensitivity.Search(
        chosen=[Layer("Conv_3", "Conv", ("Conv_3",))],
        steps=[Step([], None, 0.82, 0.18, 18.0), Step(["Conv_3"], "Conv_3", accuracy, 1 - accuracy, 19.0)],
    )


def _region(accuracy: float, met: bool) -> region_search.RegionSearch:
    layers = [Layer(n, "Conv", ("Add_0", n)) for n in ("Conv_0", "Conv_1")]
    step = Step(["Conv_0", "Conv_1"], "region of the first 2 layers", accuracy, 1 - accuracy, 22.0)
    return region_search.RegionSearch(layers, step, met)


def test_a_region_that_meets_the_budget_replaces_the_greedy_layers() -> None:
    got = auto_search._prefer_region(_greedy_ended_at(0.90), _region(0.98, True))
    assert got is not None and got.budget_met
    assert [x.name for x in got.chosen] == ["Conv_0", "Conv_1"] and got.chosen[0].nodes == ("Add_0", "Conv_0")
    assert [s.accuracy for s in got.steps] == [0.82, 0.90, 0.98]  # the greedy steps stay in the report


def test_an_unmet_region_replaces_them_only_when_it_scored_higher() -> None:
    higher = auto_search._prefer_region(_greedy_ended_at(0.90), _region(0.93, False))
    assert higher is not None and not higher.budget_met and len(higher.chosen) == 2
    assert auto_search._prefer_region(_greedy_ended_at(0.90), _region(0.90, False)) is None
    assert auto_search._prefer_region(_greedy_ended_at(0.90), region_search.RegionSearch()) is None


def test_a_masked_tagger_s_search_scores_its_unpadded_tokens_and_keeps_the_inf_mask_float(
    tmp_path: Path,
) -> None:
    """khmersm's transformer encoder (a -inf additive attention mask from a boolean padding mask):
    the search and the check score the tokens task over the characters only, and the ops that write or
    read the -inf tensors stay float (an infinite calibrated range has no integer scale)."""
    import onnx

    model = segmenter(32)
    calib = tmp_path / "calib"
    calib.mkdir()
    for k, feed in enumerate(segmenter_feeds(16, seed=1)):
        np.savez(calib / f"s{k:02d}.npz", **feed)
    config = ptq_config(
        samples=16, sensitive_layers={"keep": "fp32", "auto": {"max_accuracy_drop": 0.02, "max_layers": 2}}
    )
    task = {"type": "tokens", "mask": "mask"}
    out = run_quantize(config, model, tmp_path / "w", calib=calib, evaluate={"evaluate.task": task})
    auto = out.report["auto"]
    assert auto["final"]["metric"] == "tokens token_agreement", auto["final"]
    assert "unpadded" in str(auto), sorted(auto)
    floats = out.report["placement"]["float_nodes"]
    softmax = [n.name for n in onnx.load(str(model)).graph.node if n.op_type == "Softmax"]
    assert softmax and all(floats.get(name) == "unbounded range" for name in softmax), floats
    built = onnx.load(str(out.artifacts["model"]))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in built.graph.initializer}
    scales = [
        inits[n.input[1]] for n in built.graph.node if n.op_type == "QuantizeLinear" and n.input[1] in inits
    ]
    assert scales and all(np.isfinite(s).all() for s in scales)
