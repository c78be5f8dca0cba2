"""The verdict, evidence and state words: their types, and that each word is written in one module only."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from backends.sdk.vocab import (
    FLOAT_MEAN,
    PAIRED_MEAN,
    Evidence,
    EvidenceKind,
    Tone,
    Verdict,
    slower_than_float,
)
from reconciler.engine import health

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for top in ("reconciler", "backends", "bench") for p in (ROOT / top).rglob("*.py"))
VOCAB = "backends/sdk/vocab.py"
HEALTH = "reconciler/engine/health.py"
SHARED_WORDS = {Verdict.UNKNOWN.word}
"""Verdict words that other vocabularies use too ("unknown" op support, provider, source): these count
only where they stand for a verdict (a `verdict` key, argument or comparison)."""


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _strings(tree: ast.AST) -> Iterator[tuple[ast.Constant, ast.AST | None]]:
    """Every string constant with its parent node."""
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.Constant) and isinstance(child.value, str):
                yield child, parent


def _names_a_verdict(node: ast.AST) -> bool:
    text = ast.unparse(node) if isinstance(node, ast.expr) else ""
    return "verdict" in text.lower()


def _as_verdict(constant: ast.Constant, parent: ast.AST | None) -> bool:
    """True when the constant stands where a verdict goes: the value of a "verdict" key or argument, or
    compared with something named verdict."""
    if isinstance(parent, ast.Dict):
        return any(
            isinstance(k, ast.Constant) and k.value == "verdict" and v is constant
            for k, v in zip(parent.keys, parent.values, strict=True)
        )
    if isinstance(parent, ast.keyword):
        return parent.arg == "verdict"
    if isinstance(parent, ast.Compare):
        return any(_names_a_verdict(n) for n in (parent.left, *parent.comparators) if n is not constant)
    return False


def places_in(source: str, words: Collection[str], shared: Collection[str] = ()) -> list[tuple[str, int]]:
    """(word, line) of every string literal in `source` that is exactly one of `words` (a shared word
    only where it stands for a verdict)."""
    return sorted(
        (
            (str(constant.value), constant.lineno)
            for constant, parent in _strings(ast.parse(source))
            if constant.value in words and (constant.value not in shared or _as_verdict(constant, parent))
        ),
        key=lambda place: place[1],
    )


def occurrences(words: Collection[str], home: str, shared: Collection[str] = ()) -> dict[str, list[str]]:
    """word -> `file:line` of each of its literals in reconciler/, backends/ and bench/ (in `home`, the
    defining module, every literal)."""
    found: dict[str, list[str]] = {w: [] for w in words}
    for path in SOURCES:
        source, where = path.read_text(encoding="utf-8"), _rel(path)
        for word, line in places_in(source, words, () if where == home else shared):
            found[word].append(f"{where}:{line}")
    return found


def _misplaced(found: dict[str, list[str]], home: str, allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The words not written exactly once in `home`, or written anywhere else but the `allowed` files."""
    out = {}
    for word, places in found.items():
        at_home = [p for p in places if p.startswith(f"{home}:")]
        elsewhere = [p for p in places if not p.startswith((f"{home}:", *(f"{a}:" for a in allowed)))]
        if len(at_home) != 1 or elsewhere:
            out[word] = places
    return out


def test_each_verdict_word_is_written_once_in_the_vocabulary() -> None:
    found = occurrences([v.word for v in Verdict], VOCAB, SHARED_WORDS)
    assert _misplaced(found, VOCAB) == {}


def test_the_scan_finds_a_verdict_word_written_elsewhere() -> None:
    """The scan is not blind: a word restated as a dict value, an argument or a comparison is found, and
    a shared word used for something else is not."""
    source = (
        'x = {"verdict": "unknown"}\nf(verdict="unknown")\nok = row.verdict == "unknown"\n'
        'support = "unknown"\nmark = {"pass": 1}\nlabel = "met on estimate"\n'
    )
    words = [v.word for v in Verdict]
    assert places_in(source, words, SHARED_WORDS) == [
        ("unknown", 1),
        ("unknown", 2),
        ("unknown", 3),
        ("pass", 5),
        ("met on estimate", 6),
    ]
    assert _misplaced({"pass": [f"{VOCAB}:1", "x.py:2"]}, VOCAB) == {"pass": [f"{VOCAB}:1", "x.py:2"]}
    assert _misplaced({"pass": []}, VOCAB) == {"pass": []}
    assert _misplaced({"pass": [f"{VOCAB}:1"]}, VOCAB) == {}


def test_templates_write_no_verdict_word() -> None:
    quoted = re.compile("|".join(rf"(['\"]){re.escape(v.word)}\1" for v in Verdict))
    templates = sorted((ROOT / "reconciler").rglob("*.j2"))
    assert templates, "the report's template is scanned"
    assert [str(t) for t in templates if quoted.search(t.read_text(encoding="utf-8"))] == []


def test_each_state_word_is_written_once_in_health() -> None:
    found = occurrences({*health.SYNC_STATES, *health.HEALTH_STATES, *health.STATUSES}, HEALTH)
    assert _misplaced(found, HEALTH) == {}


def test_verdicts_carry_their_word_mark_tone_and_outcome() -> None:
    assert Verdict.of("fail (estimated)") is Verdict.FAIL_ESTIMATED and Verdict.FAIL.value == "fail"
    assert Verdict.of("pass -> fail") is None and Verdict.of(None) is None
    assert Verdict.PASS.label == "✅ pass" and Verdict.MISSED_ON_HOST.label == "🟠 missed on host CPU"
    assert [v for v in Verdict if v.passed is True] == [Verdict.PASS]
    assert [v for v in Verdict if v.failed] == [Verdict.FAIL, Verdict.FAIL_ESTIMATED]
    assert {v for v in Verdict if v.tone is Tone.BAD} == {Verdict.FAIL, Verdict.FAIL_ESTIMATED}
    assert len({v.word for v in Verdict}) == len(Verdict) == 10


def test_tones_give_a_terminal_style_and_a_page_class() -> None:
    assert (Tone.BAD.style, Tone.BAD.css, Tone.BAD.bold) == ("bold red", "bad", True)
    assert (Tone.GOOD.style, Tone.UNSURE.style, Tone.UNSURE.css) == ("green", "yellow", "unsure")
    assert {health.HEALTHY, health.SYNCED} == {w for w, t in health.TONE.items() if t is Tone.GOOD}


@pytest.mark.parametrize(
    ("text", "kind", "estimate"),
    [
        ("estimated", EvidenceKind.ESTIMATED, True),
        ("estimated: vela", EvidenceKind.ESTIMATED, True),
        ("measured:host simulator", EvidenceKind.HOST, False),
        ("measured:device", EvidenceKind.DEVICE, False),
        ("not measured", EvidenceKind.NOT_MEASURED, False),
        ("a plug-in's own words", None, False),
        (None, None, False),
    ],
)
def test_evidence_is_parsed_by_its_kind_and_keeps_its_text(
    text: str | None, kind: EvidenceKind | None, estimate: bool
) -> None:
    evidence = Evidence.parse(text)
    assert (evidence.kind, evidence.is_estimate) == (kind, estimate)
    assert str(evidence) == (text or ""), "the recorded text is kept as written"


# the sentence an int8 build slower than its float model gets
def _measured(int8_ms: float, float_ms: float | None) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {"latency_ms.mean": {"value": int8_ms, "evidence": "measured:host"}}
    if float_ms is not None:
        found[FLOAT_MEAN] = {"value": float_ms, "evidence": "measured:host"}
    return found


def test_an_int8_build_above_its_float_mean_is_named_with_both_numbers() -> None:
    said = slower_than_float(_measured(0.0189, 0.0099))
    assert said is not None and "slower than the float model" in said
    assert f"{0.0189:.4f} ms" in said and f"{0.0099:.4f} ms float" in said


def test_a_faster_or_equal_build_or_one_without_a_float_timing_says_nothing() -> None:
    assert slower_than_float(_measured(0.42, 4.31)) is None
    assert slower_than_float(_measured(1.0, 1.0)) is None
    assert slower_than_float(_measured(1.0, None)) is None


def test_the_comparison_reads_the_builds_time_in_alternation_with_its_float_model() -> None:
    """The build's own mean was taken first in a fresh process; the float model ran after it, warmer.
    The verdict compares the two timed in alternation: slower there is slower, faster there is not."""
    found = _measured(1.6, 0.7)
    found[PAIRED_MEAN] = {"value": 0.9, "evidence": "measured:host"}
    said = slower_than_float(found)
    assert said is not None and f"{0.9:.4f} ms vs {0.7:.4f} ms float" in said
    found[PAIRED_MEAN] = {"value": 0.6, "evidence": "measured:host"}
    assert slower_than_float(found) is None
