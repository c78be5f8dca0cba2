"""Gathering the measurements verify judges: the placement estimate, then what the compiler reported of
its own build (a vendor tool's placement, cycles and memory plan), then evaluate's measurements.

Later stages win, so the compiler's account replaces the op table's, and a measured latency replaces
any estimate; the artifact size is read off
the store when no runner reported it, since it is exact wherever it is read.

Every measurement names the record it came from (`record`: that stage's key) and carries a `digest`
over its record, value, evidence, detail and runner, so a hand edit of a lock file shows. Evaluate's
name their runner identity (`runner`: where it ran, the CPU or device model and serial, the
interpreter), taken from what the benchmark program reported about the machine it ran on.
"""

from __future__ import annotations

from typing import Any

from backends.sdk.vocab import Evidence, EvidenceKind, Verdict
from reconciler.engine import keys
from reconciler.state.db import Record

SOURCES = ("check", "rewrite", "compile", "evaluate")
_SIGNED = ("record", "value", "evidence", "detail", "runner")


def digest(measurement: dict[str, Any]) -> str:
    return keys.digest({k: measurement.get(k) for k in _SIGNED})


def runner_identity(report: dict[str, Any]) -> str | None:
    """ "local; Intel(R) Xeon(R) x2; Linux x86_64; python 3.12.3" from evaluate's report."""
    where = report.get("runner")
    if not where:
        return None
    reported = report.get("device")
    device: dict[str, Any] = reported if isinstance(reported, dict) else {}
    parts = [str(where)]
    for name in ("model", "serial"):
        if device.get(name):
            parts.append(f"{name} {device[name]}")
    if device.get("cpu"):
        cpus = f" x{device['cpus']}" if device.get("cpus") else ""
        parts.append(f"{device['cpu']}{cpus}")
    if device.get("system"):
        parts.append(f"{device['system']} {device.get('machine', '')}".strip())
    if device.get("python"):
        remote = device.get("executable") and str(where) != "local"
        parts.append(f"python {device['python']}" + (f" ({device['executable']})" if remote else ""))
    return "; ".join(parts)


def _signed(
    record: Record, measurement: dict[str, Any], runner: str | None, held: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The measurement named after `record`. One read from a lock file is kept as recorded (integrity
    checks it) while it names a record the variant still holds (`held`: a lock-read evaluate record
    carries every measurement of its variant); one that names a key no record has any more (a stage
    rebuilt under a new key to the same outputs keeps its report) names `record`, where it now is."""
    if "digest" in measurement and measurement.get("record") in (held or {record.key}):
        return measurement
    out = {k: v for k, v in measurement.items() if k != "digest"} | {"record": record.key}
    if runner and record.stage == "evaluate" and not Evidence.parse(out.get("evidence", "")).is_estimate:
        out["runner"] = runner
    out["digest"] = digest(out)
    return out


def collect(records: dict[str, Record], compile_failed: bool = False) -> dict[str, dict[str, Any]]:
    """The variant's measurements. After a failed compile there is no estimate (the roofline would
    describe an artifact that does not exist); a bundle whose vendor tool did not run has no size."""
    merged: dict[str, dict[str, Any]] = {}
    held = frozenset(r.key for r in records.values())
    for stage in SOURCES:
        record = records.get(stage)
        if record is None:
            continue
        runner = runner_identity(record.report) if stage == "evaluate" else None
        for name, measurement in (record.report.get("measurements") or {}).items():
            if isinstance(measurement, dict):
                merged[name] = _signed(record, measurement, runner, held)
    if compile_failed:
        for name in [n for n, m in merged.items() if Evidence.parse(m.get("evidence", "")).is_estimate]:
            if name.startswith("latency_ms."):
                merged[name] = {**merged[name], "value": None, "verdict": Verdict.UNVERIFIED.word}
                merged[name]["detail"] = "no estimate: the compile failed, there is no artifact to estimate"
                merged[name]["digest"] = digest(merged[name])
    compiled = records.get("compile")
    if "size_mb" not in merged and compiled is not None and compiled.report.get("tool_ran") is False:
        merged["size_mb"] = _signed(
            compiled,
            {
                "value": None,
                "evidence": EvidenceKind.NOT_MEASURED.value,
                "detail": "no size: the bundle's vendor tool did not run, so there is no deployable artifact "
                f"to weigh ({compiled.report.get('toolchain') or 'SDK not installed'})",
            },
            None,
        )
    if "size_mb" not in merged and compiled is not None and compiled.artifacts:
        size = sum(int(a["size"]) for a in compiled.artifacts.values())
        merged["size_mb"] = _signed(
            compiled,
            {
                "value": round(size / 1e6, 6),
                "evidence": EvidenceKind.HOST.value,
                "detail": "compiled artifact bytes",
            },
            None,
        )
    return dict(sorted(merged.items()))
