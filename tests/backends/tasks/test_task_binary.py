"""One score per sample (voice activity, wake word): a yes/no decision at a threshold, never an argmax
over one class (always class 0). The decisions, their agreement and their accuracy are computed here."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.passes.accuracy import ModelOutputs, score
from backends.sdk.errors import TerminalError
from backends.tasks import Classification
from backends.tasks.config import resolve
from backends.tasks.guess import guess

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from vad_model import save_vad


def _vad_outputs(model: Path, count: int) -> list[list[np.ndarray]]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = session.get_inputs()[0]
    rng = np.random.default_rng(5)
    feeds = [
        rng.normal(0, 1 + i % 3, [d if isinstance(d, int) else 1 for d in x.shape]) for i in range(count)
    ]
    sr = np.array(16000, dtype=np.int64)
    return [session.run(None, {"x": f.astype(np.float32), "sr": sr}) for f in feeds]


def test_a_probability_inside_an_if_is_a_decision_at_one_half(tmp_path: Path) -> None:
    model = save_vad(tmp_path / "vad.onnx")
    task = resolve(Classification(), model)
    assert isinstance(task, Classification) and task.logits is False and task.decision_threshold() == 0.5
    found = guess(model)
    assert found.task == {"type": "classification"} and "yes/no decision" in found.why
    ref = _vad_outputs(model, 24)
    probs = np.array([float(r[0].ravel()[0]) for r in ref])
    median = float(np.median(probs))
    # a candidate whose every third score is pushed just across 0.5, the others nudged within their side
    moves = [(0.5 - p) * (1.05 if i % 3 == 0 else 0.5) for i, p in enumerate(probs)]
    out = [[np.asarray(r[0]) + np.float32(m)] for r, m in zip(ref, moves, strict=True)]
    want_agree = np.mean(
        [(p > 0.5) == (float(o[0].ravel()[0]) > 0.5) for p, o in zip(probs, out, strict=True)]
    )
    names = ["prob"]
    free = score(ModelOutputs(names, out), ModelOutputs(names, [[r[0]] for r in ref]), None, task)
    assert free.metric == "decision_agreement" and free.accuracy == pytest.approx(want_agree)
    assert "yes/no decisions at score > 0.5" in free.text
    assert 0.0 < want_agree < 1.0, "the test must move some decisions and keep others"
    labels = [int(p > median) for p in probs]
    want = np.mean([int(float(o[0].ravel()[0]) > 0.5) == y for o, y in zip(out, labels, strict=True)])
    want_ref = np.mean([int(p > 0.5) == y for p, y in zip(probs, labels, strict=True)])
    got = score(ModelOutputs(names, out), ModelOutputs(names, [[r[0]] for r in ref]), labels, task)
    assert got.metric == "decision_accuracy"
    assert (got.accuracy, got.reference) == (pytest.approx(want), pytest.approx(want_ref))


def test_a_logit_output_decides_at_zero_and_labels_must_be_yes_or_no(tmp_path: Path) -> None:
    weights = numpy_helper.from_array(np.random.default_rng(1).normal(size=(8, 1)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1, 1])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logit"])], "g", [x], [y], [weights])
    path = tmp_path / "logit.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    task = resolve(Classification(), path)
    assert isinstance(task, Classification) and task.logits and task.decision_threshold() == 0.0
    assert guess(path).task == {"type": "regression"}, "a bare [1, 1] number is not guessed to be a decision"
    ref = [[np.array([[v]], np.float32)] for v in (-2.0, -0.1, 0.3, 1.5)]
    out = [[np.array([[v]], np.float32)] for v in (-1.0, 0.2, 0.1, 2.0)]
    names = ["logit"]
    got = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, task)
    assert got.accuracy == pytest.approx(3 / 4)  # -0.1 -> 0.2 crosses zero
    explicit = score(ModelOutputs(names, out), ModelOutputs(names, ref), None, Classification(threshold=0.25))
    assert explicit.accuracy == pytest.approx(3 / 4)  # at 0.25, only 0.3 -> 0.1 crosses
    with pytest.raises(TerminalError, match="label is 0 or 1"):
        score(ModelOutputs(names, out), ModelOutputs(names, ref), [0, 1, 2, 1], task)
