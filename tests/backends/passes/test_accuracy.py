"""The one accuracy implementation, on hand-made arrays with known answers, and on two real sessions."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from backends.passes.accuracy import (
    SQNR_CAP_DB,
    ModelOutputs,
    Tally,
    compare_models,
    fidelity,
    iter_outputs,
    run_model,
    score,
    sqnr_db,
)
from backends.passes.data import Sample
from backends.sdk.errors import TerminalError
from backends.tasks import Classification


def _scores(vectors: list[np.ndarray]) -> ModelOutputs:
    return ModelOutputs(["p"], [[v] for v in vectors])


def test_top1_and_top5() -> None:
    scores = _scores(
        [
            np.array([[0.1, 0.7, 0.2]]),  # top1 = 1
            np.array([[0.5, 0.2, 0.3]]).reshape(1, 3, 1, 1),  # top1 = 0, squeezenet-like shape
            np.array([0.2, 0.2, 0.6]),  # top1 = 2
            np.array([[0.4, 0.4, 0.2]]),  # tie: the lower index wins
        ]
    )
    top1, top5 = Classification(), Classification(metric="top5")
    assert score(scores, scores, [1, 0, 2, 0], top1).accuracy == 1.0
    assert score(scores, scores, [1, 1, 2, 1], top1).accuracy == 0.5
    wide = _scores([np.arange(10.0)[::-1].copy(), np.arange(10.0)])  # top-5: {0..4} and {5..9}
    assert score(wide, wide, [4, 4], top5).accuracy == 0.5
    assert score(wide, wide, [5, 9], top5).accuracy == 0.5
    assert score(wide, wide, [0, 9], top5).accuracy == 1.0


def test_classification_rejects_what_it_cannot_score() -> None:
    grid = _scores([np.zeros((1, 4, 3))])
    with pytest.raises(TerminalError, match="one score vector per sample"):
        score(grid, grid, [0], Classification())
    two = _scores([np.zeros(3), np.zeros(3)])
    with pytest.raises(TerminalError, match="labels"):
        score(two, two, [0], Classification())


def test_sqnr_known_values() -> None:
    ref = [np.ones(100)]
    assert sqnr_db(ref, [np.ones(100) * 1.1]) == pytest.approx(20.0)  # signal 100, noise 1
    assert sqnr_db(ref, [np.ones(100) * 1.01]) == pytest.approx(40.0)
    assert sqnr_db(ref, ref) == SQNR_CAP_DB
    assert sqnr_db([np.zeros(3)], [np.ones(3)]) == -SQNR_CAP_DB
    assert sqnr_db(ref, [np.full(100, np.nan)]) == -SQNR_CAP_DB


def test_fidelity_per_output_and_aggregate() -> None:
    rng = np.random.default_rng(0)
    logits = [rng.standard_normal((1, 10)) for _ in range(4)]
    feature = [rng.standard_normal((1, 8, 1, 1)) for _ in range(4)]
    reference = [[lg, ft] for lg, ft in zip(logits, feature, strict=True)]
    noisy = [[lg + 0.01, -ft] for lg, ft in zip(logits, feature, strict=True)]
    fid = fidelity(reference, noisy, ["logits", "feature"])
    by_name = {o.name: o for o in fid.outputs}
    assert by_name["logits"].cosine > 0.999
    assert by_name["feature"].cosine == pytest.approx(-1.0)
    assert fid.cosine == pytest.approx((by_name["logits"].cosine + by_name["feature"].cosine) / 2)
    assert fid.sqnr_db == min(o.sqnr_db for o in fid.outputs)
    assert fid.samples == 4
    identical = fidelity(reference, reference)
    assert (identical.cosine, identical.sqnr_db) == (1.0, SQNR_CAP_DB)
    assert "top1_agreement" not in fid.as_dict(), "no argmax over an axis guessed from the shape"
    assert math.isfinite(fidelity(reference, [[np.zeros((1, 10)), np.zeros((1, 8, 1, 1))]] * 4).cosine)


def test_fidelity_shape_mismatch_is_an_error() -> None:
    with pytest.raises(TerminalError, match="shape"):
        fidelity([[np.zeros((1, 3))]], [[np.zeros((1, 4))]])
    with pytest.raises(TerminalError, match="reference samples"):
        fidelity([[np.zeros(3)]], [[np.zeros(3)], [np.zeros(3)]])


def test_score_with_labels_against_the_float_model_without() -> None:
    ref = ModelOutputs(["p"], [[np.array([[0.1, 0.9]])], [np.array([[0.8, 0.2]])]])
    out = ModelOutputs(["p"], [[np.array([[0.6, 0.4]])], [np.array([[0.7, 0.3]])]])
    labelled = score(out, ref, labels=[1, 0], task=Classification())
    assert (labelled.metric, labelled.accuracy, labelled.reference) == ("top1", 0.5, 1.0)
    assert labelled.drop == 0.5 and labelled.labelled
    agreement = score(out, ref, task=Classification())
    assert (agreement.metric, agreement.accuracy, agreement.reference) == ("top1_agreement", 0.5, 1.0)
    generic = score(out, ref)
    assert generic.task == "generic" and generic.metric == "cosine"
    assert "generic measure" in generic.text and not generic.labelled
    keys = {
        "task",
        "metric",
        "measure",
        "text",
        "against",
        "accuracy",
        "reference",
        "drop",
        "samples",
        "extra",
    }
    assert set(generic.as_dict()) == keys | {"fidelity"}


def test_the_generic_measure_of_a_dense_map_is_the_iou_of_the_binarized_maps() -> None:
    """A text map [1, 1, H, W]: top-1 agreement over the width axis would be meaningless."""
    ref_map = np.zeros((1, 1, 8, 8), np.float32)
    ref_map[0, 0, 2:6, 2:6] = 0.9  # 16 text pixels
    out_map = ref_map.copy()
    out_map[0, 0, 2:4, 2:6] = 0.4  # half of them fall under 0.5
    ref, out = ModelOutputs(["maps"], [[ref_map]]), ModelOutputs(["maps"], [[out_map]])
    result = score(out, ref)
    assert result.measure == "map_iou@0.5" and result.task == "generic"
    assert result.accuracy == pytest.approx(0.5)
    assert result.text.startswith("IoU of the maps binarized at 0.5")
    logits = ModelOutputs(["maps"], [[ref_map * 10 - 5]])
    assert score(logits, logits).measure == "map_iou@0"


def test_the_generic_measure_without_a_map_is_cosine() -> None:
    """One value per sample (a regression head): no class axis, no map."""
    ref = ModelOutputs(["v"], [[np.array([[1.0]])], [np.array([[2.0]])]])
    out = ModelOutputs(["v"], [[np.array([[1.0]])], [np.array([[-2.0]])]])  # sign flipped on sample 1
    result = score(out, ref)
    assert result.measure == "cosine"
    assert result.accuracy == pytest.approx(0.0) == pytest.approx(result.fidelity.cosine)
    assert result.extra["max_relative_error"] == pytest.approx(2.0)  # |-2 - 2| / 2


def _linear_model(path: Path, scale: float) -> Path:
    weights = np.linspace(-1.0, 1.0, 40, dtype=np.float32).reshape(8, 5) * scale
    weights[:, 0] += np.linspace(0, 0.2, 8, dtype=np.float32) * (scale < 0)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])],
        "linear",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5])],
        [onnx.numpy_helper.from_array(weights, "w")],
    )
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), path)
    return path


def test_compare_models_runs_two_sessions(tmp_path: Path) -> None:
    reference = _linear_model(tmp_path / "ref.onnx", 1.0)
    same = _linear_model(tmp_path / "same.onnx", 1.0)
    flipped = _linear_model(tmp_path / "flipped.onnx", -1.0)
    rng = np.random.default_rng(0)
    samples = [Sample(f"s{i}", {"x": rng.standard_normal((1, 8)).astype(np.float32)}) for i in range(16)]
    good = compare_models(same, reference, samples, task=Classification())
    assert good.result.accuracy == 1.0 and good.result.fidelity.sqnr_db == SQNR_CAP_DB
    bad = compare_models(flipped, reference, samples, task=Classification(), reference=good.reference)
    assert bad.result.accuracy < 0.5
    assert bad.result.fidelity.cosine < 0
    assert bad.reference is good.reference
    assert len(run_model(reference, [s.feed for s in samples]).values) == 16


def test_tally_one_sample_at_a_time_equals_score_over_lists() -> None:
    rng = np.random.default_rng(0)
    ref = ModelOutputs(["p", "q"], [[rng.random((1, 5)), rng.random((1, 3, 2))] for _ in range(6)])
    out = ModelOutputs(["p", "q"], [[r + rng.normal(0, 0.1, r.shape) for r in s] for s in ref.values])
    labels = [int(np.argmax(s[0])) for s in ref.values]
    cases = ((None, None), (None, Classification()), (labels, Classification("p", "top5")), (labels, None))
    for given, task in cases:
        tally = Tally(out.names, task, given)
        for r, o in zip(ref.values, out.values, strict=True):
            tally.add(r, o)
        assert tally.result() == score(out, ref, given, task)


def test_iter_outputs_runs_nothing_until_asked(tmp_path: Path) -> None:
    model = _linear_model(tmp_path / "m.onnx", 1.0)
    fed: list[int] = []

    def feeds() -> Iterator[dict[str, np.ndarray]]:
        for i in range(3):
            fed.append(i)
            yield {"x": np.ones((1, 8), np.float32)}

    names, outputs = iter_outputs(model, feeds())
    assert names == ["y"] and fed == []
    assert len(next(outputs)) == 1 and fed == [0]


@pytest.mark.parametrize("weights", ["int8", "uint8"])
def test_a_qdq_model_is_scored_by_its_math_not_the_hosts_kernels(tmp_path: Path, weights: str) -> None:
    """u8 x s8 sums that overflow int16 (tests/backends/int8_sums.py): whatever this host's fused kernels
    do with them (backends.sdk.host.int8_dot), the score reads the model's own QDQ math."""
    from backends.passes import accuracy
    from tests.backends import int8_sums

    path = tmp_path / "int8_sums.onnx"
    path.write_bytes(int8_sums.model(weights))
    (got,) = accuracy.session(path).run(None, {"x": int8_sums.ones()})
    assert np.allclose(got, int8_sums.qdq_math(weights), atol=0.07)
