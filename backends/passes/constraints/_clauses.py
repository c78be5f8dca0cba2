"""Clause splitting: a row's text becomes the clauses rules match, without the source tags ("doc:",
"[mapped via ...]") the tables put in front of them.
"""

from __future__ import annotations

import re
from functools import cache

_PREFIX = re.compile(
    r"^(?:doc|code\(derived\)|npu|md|mlprogram|\[[^\]]*\])\s*:?\s*",
    re.IGNORECASE,
)


@cache
def split_clauses(text: str) -> tuple[str, ...]:
    """Top-level clauses: split at ';' and '|' outside brackets, then at sentence ends."""
    text = _mlprogram_part(text)
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        if ch in ";|" and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    out: list[str] = []
    for part in parts:
        for sentence in re.split(r"(?<=[a-z0-9)\]`'])\.\s+(?=[A-Z`])", part.strip()):
            clause = _strip_prefixes(sentence.strip().rstrip("."))
            if clause:
                out.append(clause)
    return tuple(out)


def _mlprogram_part(text: str) -> str:
    """Core ML rows describe two model formats; the ML Program format (the EP default) is evaluated."""
    m = re.match(r"\s*MLProgram:\s*(.*?);\s*NeuralNetwork:", text, re.DOTALL)
    return f"MLProgram: {m.group(1)}" if m else text


def _strip_prefixes(clause: str) -> str:
    while True:
        stripped = _PREFIX.sub("", clause, count=1).strip()
        if stripped == clause:
            return clause
        clause = stripped
