"""CTC sequence recognition on real recognizers: PaddleOCR's PP-OCRv4 rec from the rapidocr wheel
([1, T, C], batch first, with its charset) and ddddocr's OCR model ([T, 1, C], time first, no charset).
npuctl's exact match and CER equal a greedy decode + edit distance written in the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from independent import ctc_greedy, levenshtein
from task_models import ddddocr_model, noisy, rapidocr_model, run, text_line

from backends.passes.accuracy import ModelOutputs, score
from backends.sdk.errors import TerminalError
from backends.tasks import Ctc, from_evaluate

TEXTS = ["HELLO 42", "npuctl", "AB12CD", "Quant 8", "Zebra", "OCR test", "x9y8z7", "Mixed Case"]


def _charset(model: Path, folder: Path) -> Path:
    """PP-OCR's characters from the model's metadata, plus the space class it appends (6625 classes)."""
    proto = onnx.load(str(model), load_external_data=False)
    chars = next(p.value for p in proto.metadata_props if p.key == "character").split("\n")
    path = folder / "charset.txt"
    path.write_text("\n".join([*chars, " "]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ppocr(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("rec")
    rec = rapidocr_model("ch_PP-OCRv4_rec_infer.onnx")
    feeds = []
    for text in TEXTS:
        gray = text_line(text, 48, 192).astype(np.float32)
        feeds.append({"x": ((gray / 255 - 0.5) / 0.5)[None, None].repeat(3, 1)})
    charset = _charset(rec, folder)
    return {
        "ref": run(rec, feeds),
        "out": run(noisy(rec, folder / "rec-noisy.onnx", 0.03, seed=1), feeds),
        "charset": charset,
        "chars": [*charset.read_text(encoding="utf-8").split("\n")[:-1]],
    }


def _decoded(values: list[list[np.ndarray]], chars: list[str] | None) -> list[Any]:
    out = []
    for (v,) in values:
        idx = ctc_greedy(v)
        out.append("".join(chars[i - 1] for i in idx) if chars is not None else idx)
    return out


def _rates(got: list[Any], want: list[Any]) -> tuple[float, float]:
    exact = sum(g == w for g, w in zip(got, want, strict=True)) / len(want)
    cer = sum(levenshtein(list(g), list(w)) for g, w in zip(got, want, strict=True)) / sum(
        len(w) for w in want
    )
    return exact, cer


def test_ppocr_rec_exact_match_and_cer_against_labels_and_float(ppocr: dict[str, Any]) -> None:
    names = ["softmax"]
    ref, out = ModelOutputs(names, ppocr["ref"]), ModelOutputs(names, ppocr["out"])
    task = from_evaluate({"task": {"type": "ctc"}}, ppocr["charset"])
    assert isinstance(task, Ctc) and task.charset is not None and len(task.charset) == 6624
    ref_text, out_text = _decoded(ppocr["ref"], ppocr["chars"]), _decoded(ppocr["out"], ppocr["chars"])
    print(ref_text, out_text)
    exact, cer = _rates(out_text, TEXTS)
    ref_exact, ref_cer = _rates(ref_text, TEXTS)
    labelled = score(out, ref, TEXTS, task)
    assert labelled.metric == "exact_match" and labelled.labelled
    assert labelled.accuracy == pytest.approx(exact, abs=0.01)
    assert labelled.reference == pytest.approx(ref_exact, abs=0.01)
    assert labelled.extra["cer"] == pytest.approx(cer, abs=0.01)
    assert labelled.extra["reference_cer"] == pytest.approx(ref_cer, abs=0.01)

    float_exact, float_cer = _rates(out_text, ref_text)
    assert 0.0 < float_exact < 1.0, "the perturbed model must change some strings, not all"
    unlabelled = score(out, ref, None, task)
    assert unlabelled.accuracy == pytest.approx(float_exact, abs=0.01) and unlabelled.reference == 1.0
    assert unlabelled.extra["cer"] == pytest.approx(float_cer, abs=0.01)
    chars = score(out, ref, None, Ctc(metric="char_accuracy"))
    assert chars.metric == "char_accuracy" and chars.accuracy == pytest.approx(1 - float_cer, abs=0.01)


def test_ddddocr_time_first_output_without_charset(tmp_path: Path) -> None:
    model = ddddocr_model("common.onnx")
    feeds = [{"input1": (text_line(t, 64, 160).astype(np.float32) / 255)[None, None]} for t in TEXTS[:6]]
    ref_values = run(model, feeds)
    out_values = run(noisy(model, tmp_path / "ocr-noisy.onnx", 0.1, seed=1), feeds)
    assert ref_values[0][0].shape[1] == 1, "ddddocr's output is [T, 1, C]"
    ref_idx, out_idx = _decoded(ref_values, None), _decoded(out_values, None)
    exact, cer = _rates(out_idx, ref_idx)
    assert 0.0 < exact < 1.0
    got = score(ModelOutputs(["387"], out_values), ModelOutputs(["387"], ref_values), None, Ctc())
    assert got.accuracy == pytest.approx(exact, abs=0.01)
    assert got.extra["cer"] == pytest.approx(cer, abs=0.01)
    assert "against the float model's strings" in got.text


def test_text_labels_need_a_charset_and_a_charset_must_fit_the_classes(
    ppocr: dict[str, Any], tmp_path: Path
) -> None:
    names = ["softmax"]
    ref = ModelOutputs(names, ppocr["ref"])
    with pytest.raises(TerminalError, match=r"set evaluate\.task\.charset"):
        score(ref, ref, TEXTS, Ctc())
    short = tmp_path / "short.txt"
    short.write_text("a\nb\n")
    with pytest.raises(TerminalError, match="charset has 2 entries; the model has 6625 classes"):
        score(ref, ref, TEXTS, from_evaluate({"task": {"type": "ctc"}}, short))


def test_case_folded_strings_match_a_casefold_written_here(ppocr: dict[str, Any]) -> None:
    """`case_sensitive: false`: both the labels and the decoded strings are folded, so a model that reads
    'w' for 'W' is right; against labels and against the float model, beside the case-sensitive score."""
    names = ["softmax"]
    ref, out = ModelOutputs(names, ppocr["ref"]), ModelOutputs(names, ppocr["out"])
    folded = from_evaluate({"task": {"type": "ctc", "case_sensitive": False}}, ppocr["charset"])
    assert isinstance(folded, Ctc) and not folded.case_sensitive
    ref_text, out_text = _decoded(ppocr["ref"], ppocr["chars"]), _decoded(ppocr["out"], ppocr["chars"])
    lower = [t.swapcase() for t in TEXTS]  # labels in the other case: only a folded compare matches them
    exact, cer = _rates([t.casefold() for t in out_text], [t.casefold() for t in lower])
    got = score(out, ref, lower, folded)
    assert got.accuracy == pytest.approx(exact, abs=0.01) and got.extra["cer"] == pytest.approx(cer, abs=0.01)
    assert (
        got.accuracy
        > score(out, ref, lower, from_evaluate({"task": {"type": "ctc"}}, ppocr["charset"])).accuracy
    )
    float_exact, _ = _rates([t.casefold() for t in out_text], [t.casefold() for t in ref_text])
    unlabelled = score(out, ref, None, folded)
    assert unlabelled.accuracy == pytest.approx(float_exact, abs=0.01) and "case-folded" in unlabelled.text
    with pytest.raises(TerminalError, match=r"case_sensitive: false compares characters"):
        from_evaluate({"task": {"type": "ctc", "case_sensitive": False}}, None)
