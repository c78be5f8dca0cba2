"""The tokens task: per-token class agreement with the float model at the positions the padding mask
keeps, on hand-made arrays and on a real segmenter (khmersm's transformer encoder) against a perturbed
copy of itself; the expected figures are computed here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from task_models import noisy, segmenter, segmenter_feeds

from backends.passes.accuracy import ModelOutputs, run_model, score
from backends.sdk.errors import TerminalError
from backends.tasks import Tokens, from_evaluate


def _scores(classes: list[list[int]], c: int = 3) -> np.ndarray:
    """[1, T, c] scores whose argmax is `classes[0][t]` at each position."""
    out = np.zeros((1, len(classes[0]), c), np.float32)
    for t, k in enumerate(classes[0]):
        out[0, t, k] = 1.0
    return out


def test_only_unpadded_positions_count_in_either_mask_convention() -> None:
    ref = [[_scores([[0, 1, 2, 0, 1, 2]])], [_scores([[2, 2, 2, 2, 2, 2]])]]
    # sample 0 disagrees at position 1 (kept) and at 4, 5 (padding); sample 1 only at 5 (padding)
    out = [[_scores([[0, 2, 2, 0, 0, 0]])], [_scores([[2, 2, 2, 2, 2, 0]])]]
    keep = [np.array([[1, 1, 1, 1, 0, 0]], bool), np.array([[1, 1, 1, 1, 1, 0]], bool)]
    for pad, masks in ((0, keep), (1, [~m for m in keep])):
        got = score(
            ModelOutputs(["o"], out),
            ModelOutputs(["o"], ref),
            task=Tokens(mask="m", pad_value=pad),
            samples=[{"m": m} for m in masks],
        )
        assert got.metric == "token_agreement" and got.task == "tokens"
        assert got.accuracy == pytest.approx(8 / 9)  # 9 unpadded tokens, 1 changed
        assert got.extra["sequence_match"] == pytest.approx(1 / 2)
        assert got.extra["unpadded_fraction"] == pytest.approx(9 / 12)
        assert "9 unpadded of 12 positions" in got.text
    unmasked = score(ModelOutputs(["o"], out), ModelOutputs(["o"], ref), task=Tokens())
    assert unmasked.accuracy == pytest.approx(8 / 12)


def test_fidelity_beside_the_task_is_measured_on_the_unpadded_positions() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1, 8, 4)).astype(np.float32)
    out = ref.copy()
    out[0, 5:] = -ref[0, 5:]  # padding: anything at all
    out[0, :5] += 0.1 * rng.standard_normal((5, 4)).astype(np.float32)
    mask = np.arange(8)[None] < 5
    got = score(
        ModelOutputs(["o"], [[out]]),
        ModelOutputs(["o"], [[ref]]),
        task=Tokens(mask="m"),
        samples=[{"m": mask}],
    )
    a, b = ref[0, :5].ravel().astype(np.float64), out[0, :5].ravel().astype(np.float64)
    want = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert got.fidelity.cosine == pytest.approx(want, abs=1e-6)
    assert got.extra["cosine"] == pytest.approx(want, abs=1e-6)


def test_the_task_is_read_from_the_spec_and_refuses_what_it_cannot_score() -> None:
    task = from_evaluate(
        {"task": {"type": "tokens", "mask": "attention_mask", "pad_value": 1, "metric": "sequence_match"}}
    )
    assert task == Tokens(None, "attention_mask", 1, "sequence_match")
    ref = ModelOutputs(["o"], [[_scores([[0, 1]])]])
    with pytest.raises(TerminalError, match="reads input 'm'"):
        score(ref, ref, task=Tokens(mask="m"))
    with pytest.raises(TerminalError, match=r"has shape \[1, 3\]"):
        score(ref, ref, task=Tokens(mask="m"), samples=[{"m": np.ones((1, 3), bool)}])
    with pytest.raises(TerminalError, match="remove the labels"):
        score(ref, ref, [0], Tokens())
    with pytest.raises(TerminalError, match="every position as padding"):
        score(ref, ref, task=Tokens(mask="m"), samples=[{"m": np.zeros((1, 2), bool)}])


def test_a_real_segmenter_is_scored_at_its_characters_only(tmp_path: Path) -> None:
    model = segmenter(32)
    candidate = noisy(model, tmp_path / "noisy.onnx", 0.3)
    feeds = segmenter_feeds(12)
    ref, out = run_model(model, feeds), run_model(candidate, feeds)
    got = score(out, ref, task=Tokens(mask="mask"), samples=feeds)
    same = kept = whole = 0
    for feed, r, o in zip(feeds, ref.values, out.values, strict=True):
        m = feed["mask"][0]
        agree = np.argmax(r[0][0], -1) == np.argmax(o[0][0], -1)
        same, kept, whole = same + int(agree[m].sum()), kept + int(m.sum()), whole + int(agree[m].all())
    assert got.accuracy == pytest.approx(same / kept)
    assert got.extra["sequence_match"] == pytest.approx(whole / len(feeds))
    assert 0.0 < got.accuracy < 1.0, "the perturbation moves some characters' tags, not all"
    everywhere = score(out, ref, task=Tokens())
    assert everywhere.accuracy != pytest.approx(got.accuracy), "padding would have changed the figure"
