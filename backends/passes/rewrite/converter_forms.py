"""The model a converter reads: the converter-forms rewrites (rules.convertible) applied, verified.

Backends whose converter rejects forms real exporters write (Core ML's onnx2torch, the TFLite path's
onnx2tf) call `write_convertible` on the model they are about to convert. The rewrites are exact; each
is still verified like any rewrite (graph outputs within rewrite.verify.TOLERANCE on seeded feeds, NaN
in the same place on both sides counted equal) and left out when it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes.rewrite.graph_edit import apply_matches
from backends.passes.rewrite.rules import Context
from backends.passes.rewrite.rules.convertible import REWRITES
from backends.passes.rewrite.verify import State, Verifier, seeded_feeds

if TYPE_CHECKING:
    import onnx


def disabled(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The converter forms a stage's request config turns off: the names `rewrite.disable` lists (the
    stage reads the field only when it names something)."""
    raw = config.get("rewrite.disable")
    if raw is None and isinstance(config.get("rewrite"), Mapping):
        raw = config["rewrite"].get("disable")
    return tuple(str(name) for name in raw or ())


def convertible(
    model: onnx.ModelProto,
    log: Callable[[str], None],
    only: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
) -> tuple[onnx.ModelProto, list[str]]:
    """`model` with every converter-forms rewrite (or those named in `only`: what one converter needs;
    none named in `skip`: a form the converter has a better reading of) applied where it matches and
    verifies; the notes ("explicit_pads x3") of those applied."""
    from backends.passes.facts import analyse

    verifier: Verifier | None = None
    notes: list[str] = []
    chosen = [rw for rw in REWRITES if (only is None or rw.name in only) and rw.name not in skip]
    for rw in chosen:
        facts = analyse(model)
        matches = rw.find(Context(model, facts, {}, None, None))
        if not matches:
            continue
        candidate = apply_matches(model, matches)
        verifier = verifier or Verifier(model, [feed for _, feed in seeded_feeds(model)])
        ok, diff = verifier.check(State(model, facts, {}), candidate)
        if not ok:
            log(f"{rw.name}: {len(matches)} matches not applied: verification failed (max abs diff {diff:g})")
            continue
        verifier.accept()
        model = candidate
        notes.append(f"{rw.name} x{len(matches)}")
        log(f"{rw.name}: applied on {len(matches)} nodes ({', '.join(m.anchor for m in matches[:5])})")
    return model, notes


def write_convertible(
    source: Path, dest: Path, log: Callable[[str], None], skip: tuple[str, ...] = ()
) -> list[str]:
    """Writes `source` to `dest` as `convertible` makes it; the notes of the rewrites applied."""
    import onnx

    model = onnx.load(str(source))
    out, notes = convertible(model, log, skip=skip)
    dest.write_bytes(out.SerializeToString() if notes else source.read_bytes())
    return notes
