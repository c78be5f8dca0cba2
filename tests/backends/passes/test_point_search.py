"""The auto search ranks every quantization point (activation Q/DQ pairs and weights) by its cheap
signal, confirms with the task metric, and finds a single-tensor culprit: the output Concat of a
YOLOv8-style head under ONNX Runtime's every-op placement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from backends.passes.data import Sample
from backends.passes.quant import points as quant_points
from backends.passes.quant.calibration import ChunkReader
from tests.backends.passes.quant_helpers import ptq_config, run_quantize
from tests.backends.passes.test_qdq_placement import _toy
from tests.backends.passes.yolo_head import photo_samples, yolov8_at


def _run(model: bytes | str, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def test_every_point_kept_float_is_the_float_model_and_the_mixed_concat_ranks_first(tmp_path: Path) -> None:
    model = _toy(tmp_path / "toy.onnx")
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    qdq_path = tmp_path / "qdq.onnx"
    quantize_static(
        str(model),
        str(qdq_path),
        ChunkReader(feeds),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        extra_options={"QDQKeepRemovableActivations": True},  # as the search builds: Relu kept
    )
    qdq, prepared = onnx.load(str(qdq_path)), onnx.load(str(model))
    weights = {t.name: t for t in prepared.graph.initializer}
    found = quant_points.points(qdq)
    assert {p.kind for p in found} == {"activation", "weight"}
    assert {p.name for p in found if p.kind == "weight"} == {"w1", "w2", "k"}  # k: the Mul constant
    x = feeds[0]["x"]
    bypassed = quant_points.kept_float(qdq, found, weights)
    np.testing.assert_allclose(_run(bypassed, x), _run(str(model), x), rtol=1e-5, atol=1e-4)
    assert not np.allclose(_run(str(qdq_path), x), _run(str(model), x), atol=1e-4)
    samples = [Sample(str(i), f) for i, f in enumerate(feeds)]
    ranked = sorted(quant_points.signals(qdq, prepared, weights, found, samples), key=lambda s: s.sqnr_db)
    # the concat (or the transpose that carries its scale) joins 0-320 with 0-1: its score slice is lost
    assert ranked[0].point.tensor in ("cat", "y"), [(s.point.label, round(s.sqnr_db, 1)) for s in ranked]
    assert ranked[0].sqnr_db < 10


@pytest.mark.slow
def test_the_first_kept_point_on_a_yolov8_head_is_its_output_concat(tmp_path: Path) -> None:
    v8 = yolov8_at(tmp_path / "m")
    calib = photo_samples(tmp_path / "calib", 8, calibration=True)
    evaluation = photo_samples(tmp_path / "eval", 8, calibration=False)
    config = ptq_config(
        8,
        placement="every_op",
        # a budget one point can meet: one the search cannot meet fails the stage (quantize_check)
        sensitive_layers={"keep": "fp32", "auto": {"max_accuracy_drop": 0.25, "max_layers": 1}},
    )
    out = run_quantize(
        config,
        v8,
        tmp_path / "w",
        calib,
        evaluate={"evaluate.task": {"type": "detection"}},
        extra_inputs={"eval_data": evaluation},
    )
    auto = out.report["auto"]
    concat = [n for n in onnx.load(str(v8)).graph.node if n.op_type == "Concat"][-1]
    first = auto["table"][0]
    print(first, auto["steps"])
    assert first["op_type"] == "Concat" and first["range_ratio"] > 100
    assert auto["chosen"][0]["kind"] == "activation"
    # the head's output concat: its own tensor, or the model output ORT's pre-processing moved it onto
    assert auto["chosen"][0]["layer"].split(" ", 1)[1] in (concat.output[0], "boxes_scores")
    assert auto["steps"][1]["accuracy"] > auto["steps"][0]["accuracy"] + 0.1
    assert out.report["kept_points"][0]["tensor"] == auto["chosen"][0]["layer"].split(" ", 1)[1]


class _SpreadDamage:
    """A stand-in scorer (named so: the real one runs ONNX Runtime): the model it is given is the list
    of points kept float, and its accuracy recovers only when at least `needed` of the `spread` worst
    points are kept (0.02 per hit beyond the first below that): damage spread so that no single point
    shows in the metric."""

    metric = "stand-in exact_match"
    reference_accuracy = 1.0

    def __init__(self, worst: list[str], needed: int) -> None:
        self.worst, self.needed = set(worst), needed
        self.samples = list(range(10))

    def __call__(self, model: Path) -> Any:
        from backends.passes.quant.sensitivity import Score

        kept = set(model.read_text().split())
        hit = len(kept & self.worst)
        return Score(1.0 if hit >= self.needed else 0.8 + 0.02 * max(0, hit - 1), 20.0 + hit)


def test_spread_damage_no_single_point_shows_is_recovered_by_the_bulk_step(tmp_path: Path) -> None:
    from backends.passes.quant import point_search

    names = [f"t{i}" for i in range(20)]
    ordered = [
        quant_points.Signal(quant_points.Point(n, "activation", "Conv", f"q{n}"), 10.0 + i, 1.0)
        for i, n in enumerate(names)
    ]
    scorer: Any = _SpreadDamage(names[:6], needed=5)  # the six worst by the cheap signal carry the damage
    base = scorer(_write(tmp_path / "base.txt", []))
    logs: list[str] = []
    found = point_search.search(
        ordered,
        lambda points: " ".join(p.name for p in points).encode(),
        scorer,
        base,
        0.03,
        16,
        tmp_path,
        logs.append,
    )
    assert found.budget_met, logs
    # single points improved nothing; the smallest doubling group that meets the budget is 8 (2, 4 fail),
    # then each of its points is tried quantized again, last first: any 5 of the worst 6 are enough, so
    # t7, t6 (passengers) and t5 go back to int8 and t0-t4 stay float
    assert found.steps[-2]["added"] == "8 points (bulk)" and len(found.steps[-2]["kept"]) == 8
    assert [p.name for p in found.chosen] == names[:5]
    assert found.steps[-1]["added"] == "pruned to 5 points" and found.score.accuracy == 1.0
    assert any("prune activation t4" in line and "kept" in line for line in logs)
    assert any("bulk 4 points" in line and "0.8600" in line for line in logs)

    scorer = _SpreadDamage(names[:6], needed=6)
    found = point_search.search(
        ordered,
        lambda p: " ".join(x.name for x in p).encode(),
        scorer,
        base,
        0.03,
        4,
        tmp_path,
        logs.append,
    )
    # groups of 2 and 4 improve (0.82, 0.86) but meet no budget: kept, they would take the room the
    # layer phase needs, so nothing is kept
    assert not found.budget_met and found.chosen == []
    assert any("bulk 4 points" in line and "0.8600" in line for line in logs)
    # ... but the best of them is remembered, for when the layer phase ends lower
    assert found.best_group is not None
    group, got = found.best_group
    assert [p.name for p in group] == names[:4] and abs(got.accuracy - 0.86) < 1e-9


def _write(path: Path, names: list[str]) -> Path:
    path.write_text(" ".join(names))
    return path
