"""A three-way merge of one lock file, for git's merge driver (`npuctl lock merge %O %A %B %P`).

Two branches that rebuilt different stages of one spec both rewrite its lock file, and git's line merge
leaves conflict markers in it (an unreadable lock, which every command refuses). The lock is a set of
records, so it merges as records: per variant, each stage record, each measurement and each other field
is taken from the side that changed it (a change on one side wins over the unchanged base; the same
change on both sides is one change). Records are carried whole, never rebuilt or re-encoded field by
field, so whatever they hold (a signature over their canonical form included) survives the merge.

A real conflict, the same stage or measurement of the same variant changed differently on both sides,
is settled by neither side: its record is dropped, so the next `npuctl apply` rebuilds and measures it
(both sides' records stay in the merge's parents, in git history, which `npuctl audit` reads). The
verdicts are derived again from the merged measurements and the merged SLOs, so the result passes the
lock's integrity checks; its `sync` says OutOfSync when both sides changed it, since neither built it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.engine import health
from reconciler.engine.verify import judge
from reconciler.records import measured as measured_view

_MISSING: Any = object()
"""A key absent on one side (a record that side removed or never had)."""

_MERGED_HERE = ("variants", "model", "sources", "health", "sync")
"""Top-level fields merged by their own rule; every other one is taken three-way, ours on a conflict."""


@dataclass
class Merged:
    lock: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    """One line per record left to a rebuild: `variant/stage: why` (the next apply rebuilds it)."""


def _three_way(base: Any, ours: Any, theirs: Any) -> tuple[Any, bool]:
    """(the merged value, whether both sides changed it differently); on a conflict the value is ours."""
    if ours == theirs or theirs == base:
        return ours, False
    if ours == base:
        return theirs, False
    return ours, True


def _entries(base: Any, ours: Any, theirs: Any) -> list[tuple[str, Any, Any, Any]]:
    """(name, base, ours, theirs) for every name in any of the three mappings, sorted by name."""
    sides = [side if isinstance(side, dict) else {} for side in (base, ours, theirs)]
    names = sorted(set().union(*sides))
    return [(name, *(side.get(name, _MISSING) for side in sides)) for name in names]


def _put(out: dict[str, Any], name: str, value: Any) -> None:
    if value is not _MISSING:
        out[name] = value


def _merge_records(base: Any, ours: Any, theirs: Any) -> tuple[dict[str, Any], list[str]]:
    """Records by name, each whole from the side that changed it, and the names changed on both sides
    differently (left out)."""
    out: dict[str, Any] = {}
    conflicts = []
    for name, b, o, t in _entries(base, ours, theirs):
        value, conflict = _three_way(b, o, t)
        if conflict:
            conflicts.append(name)
        else:
            _put(out, name, value)
    return out, conflicts


def _producers(names: list[str], *sides: dict[str, Any]) -> set[str]:
    """The stage keys that measured these measurements, on any side."""
    found = ((side.get("measurements") or {}).get(name) for side in sides for name in names)
    return {
        entry["record"] for entry in found if isinstance(entry, dict) and isinstance(entry.get("record"), str)
    }


def _merge_variant(name: str, base: Any, ours: Any, theirs: Any, dropped: list[str]) -> dict[str, Any]:
    base, ours, theirs = (v if isinstance(v, dict) else {} for v in (base, ours, theirs))
    stages, clashed = _merge_records(base.get("stages"), ours.get("stages"), theirs.get("stages"))
    measurements, clashed_measures = _merge_records(
        base.get("measurements"), ours.get("measurements"), theirs.get("measurements")
    )
    dropped += [f"{name}/{stage}: changed on both sides" for stage in clashed]
    remeasured = _producers(clashed_measures, ours, theirs)  # a build measured differently on each side
    for stage, entry in sorted(stages.items()):
        if isinstance(entry, dict) and entry.get("key") in remeasured:
            del stages[stage]
            dropped.append(f"{name}/{stage}: its measurements changed on both sides")
    kept_keys = {entry.get("key") for entry in stages.values() if isinstance(entry, dict)}
    orphans = [
        m
        for m, e in measurements.items()
        if isinstance(e, dict) and e.get("record", kept_keys) not in kept_keys
    ]
    for measured in orphans:
        del measurements[measured]
    gone = sorted({*clashed_measures, *orphans})
    if gone:
        dropped.append(f"{name}: measurements {', '.join(gone)}: left with the stage that measures them")
    out: dict[str, Any] = {}
    for key, b, o, t in _entries(base, ours, theirs):
        if key in ("stages", "measurements", "verdicts"):
            continue
        _put(
            out, key, _three_way(b, o, t)[0]
        )  # ours on a conflict: the shape (other shapes' stages have other keys)
    out.update(stages=stages, measurements=measurements)
    return out


def _merge_sources(base: Any, ours: Any, theirs: Any) -> dict[str, Any]:
    """What the lock was built from, per input; an input both sides changed is left out (unknown)."""
    base, ours, theirs = (v if isinstance(v, dict) else {} for v in (base, ours, theirs))
    out: dict[str, Any] = {}
    digest, conflict = _three_way(
        base.get("spec_digest", _MISSING),
        ours.get("spec_digest", _MISSING),
        theirs.get("spec_digest", _MISSING),
    )
    if not conflict:
        _put(out, "spec_digest", digest)
    files = _merge_records(base.get("files"), ours.get("files"), theirs.get("files"))[0]
    if files or "files" in ours or "files" in theirs:
        out["files"] = files
    return out


def merge(base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]) -> Merged:
    """The three-way merge of one spec's lock file (`base` {} when the file is new on both sides)."""
    dropped: list[str] = []
    lock: dict[str, Any] = {}
    for key, b, o, t in _entries(base, ours, theirs):
        if key not in _MERGED_HERE:
            _put(lock, key, _three_way(b, o, t)[0])
    variants = {
        name: _merge_variant(name, b, o, t, dropped)
        for name, b, o, t in _entries(base.get("variants"), ours.get("variants"), theirs.get("variants"))
        if _three_way(b, o, t) != (_MISSING, False)  # removed on one side, unchanged on the other
    }
    judged = []
    for name, entry in variants.items():
        verdicts = judge(lock.get("slo"), measured_view.measurements(entry["measurements"]), name)
        entry["verdicts"] = [v.lock_json() for v in verdicts]
        judged.extend(verdicts)
    lock["variants"] = variants
    lock["sources"] = _merge_sources(base.get("sources"), ours.get("sources"), theirs.get("sources"))
    lock["model"] = _merge_model(base.get("model"), ours.get("model"), theirs.get("model"), variants)
    both_changed = ours != base and theirs != base and ours != theirs
    lock["sync"] = health.OUT_OF_SYNC if both_changed else ours.get("sync", health.OUT_OF_SYNC)
    lock["health"] = health.of_verdicts(judged)
    return Merged(lock, dropped)


def _merge_model(base: Any, ours: Any, theirs: Any, variants: dict[str, Any]) -> dict[str, Any]:
    """The model's version (ours on a conflict) and the import key of the merged default variant."""
    base, ours, theirs = (v if isinstance(v, dict) else {} for v in (base, ours, theirs))
    out = {
        k: v for k, b, o, t in _entries(base, ours, theirs) if (v := _three_way(b, o, t)[0]) is not _MISSING
    }
    imported = (variants.get("default") or {}).get("stages", {}).get("import")
    out["import_key"] = imported.get("key") if isinstance(imported, dict) else None
    return out
