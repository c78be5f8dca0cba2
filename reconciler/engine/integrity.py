"""Lock integrity: what a committed lock file says must follow from what it records.

Checked on every read by plan, status and validate: each stage key is the digest of its recorded key
inputs, each measurement's digest matches its record, value, evidence and runner, and each verdict
is re-derived from the recorded measurement and the recorded threshold. A lock that fails any check
is reported with its file and field and is not used: its verdicts are never read as passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.engine import keys, measurements
from reconciler.engine.verify import judge
from reconciler.records import measured

_COMPARED = ("threshold", "comparison", "value", "passed", "verdict", "evidence")


def _stage_problems(where: str, stages: Any) -> list[str]:
    out = []
    for name, stage in sorted((stages or {}).items()):
        if not isinstance(stage, dict):
            out.append(f"{where}.stages.{name}: not an object")
            continue
        inputs = stage.get("inputs")
        if isinstance(inputs, dict) and inputs and keys.digest(inputs) != stage.get("key"):
            out.append(f"{where}.stages.{name}.key: is not the digest of its recorded inputs")
    return out


def _measurement_problems(where: str, recorded: Any) -> list[str]:
    out = []
    for name, measurement in sorted((recorded or {}).items()):
        if not isinstance(measurement, dict):
            out.append(f"{where}.measurements.{name}: not an object")
        elif "digest" in measurement and measurements.digest(measurement) != measurement["digest"]:
            out.append(f"{where}.measurements.{name}: value or evidence does not match its digest")
    return out


def _verdict_problems(where: str, slo: Any, variant: str, entry: dict[str, Any]) -> list[str]:
    listed = entry.get("verdicts")
    recorded: list[Any] = listed if isinstance(listed, list) else []
    derived = {
        v.name: v.lock_json() for v in judge(slo, measured.measurements(entry.get("measurements")), variant)
    }
    out = []
    seen = set()
    for index, verdict in enumerate(recorded):
        name = verdict.get("name") if isinstance(verdict, dict) else None
        field = f"{where}.verdicts[{index}]"
        if name not in derived:
            out.append(f"{field}: no SLO {name!r} in the lock's slo")
            continue
        seen.add(name)
        wrong = [k for k in _COMPARED if verdict.get(k) != derived[name].get(k)]
        if wrong:
            out.append(
                f"{field} ({name}).{wrong[0]}: recorded {verdict.get(wrong[0])!r}, "
                f"the recorded measurement gives {derived[name].get(wrong[0])!r} (tampered)"
            )
    out += [f"{where}.verdicts: missing the verdict for {name}" for name in sorted(set(derived) - seen)]
    return out


def problems(lock: dict[str, Any] | None, path: Path) -> list[str]:
    """One line per finding, `FILE: field: why`; [] for a consistent lock or no lock."""
    if lock is None:
        return []
    out: list[str] = []
    variants = lock.get("variants")
    if not isinstance(variants, dict):
        return [f"{path}: variants: missing or not an object"]
    slo = lock.get("slo")
    for name, entry in sorted(variants.items()):
        where = f"variants.{name}"
        if not isinstance(entry, dict):
            out.append(f"{where}: not an object")
            continue
        out += _stage_problems(where, entry.get("stages"))
        out += _measurement_problems(where, entry.get("measurements"))
        out += _verdict_problems(where, slo, str(name), entry)
    return [f"{path}: {line}" for line in out]
