"""What a report shows, read from the lock file, the stage records, the store and the audit history.

Every section degrades on its own: a spec applied on another machine (no local records), a stage that
reports no per-layer sensitivity, a placement without a model to draw edges from. Each gap becomes a note
in the page saying why, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from backends.sdk.vocab import UNTRUSTED, slower_than_float
from reconciler.audit import Filters, run
from reconciler.audit.entries import AuditEntry
from reconciler.engine import health, throughput
from reconciler.engine.sources import spec_digest
from reconciler.records.judged import Judged
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import lockread
from reconciler.state.db import Database, Record
from reconciler.state.lockread import LockView
from reconciler.state.store import Store, sha256_file
from reconciler.trust import policy
from reconciler.trust.signing import Trust


@dataclass
class Placement:
    report: dict[str, Any]
    edges: list[tuple[str, str]]
    """(producer node, consumer node) between placed nodes; empty when the model could not be read."""
    source: str
    """The stage whose placement this is (compile: the vendor compiler's own report of its build; rewrite:
    the op table after replacing unsupported ops; else check, the op table on the imported model)."""


@dataclass
class ReportData:
    spec: str
    target: str
    file: str
    status: str
    """The lock's health (Healthy / Degraded / Unknown); Unknown when the lock fails its integrity checks."""
    sync: str
    model_version: str | None
    model_digest: str | None
    generated: str
    revision: str | None
    verdicts: list[Judged] = field(default_factory=list)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)
    """variant -> the measurements exactly as the lock records them."""
    placement: Placement | None = None
    """The placement of the model the compiler receives (after the rewrite stage when it ran)."""
    placement_before: Placement | None = None
    """The check stage's placement of the imported model, when the rewrite changed it."""
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    """variant -> evaluate's latency_ms report (samples, percentiles)."""
    throughput_fps: dict[str, float] = field(default_factory=dict)
    """variant -> frames per second derived from the recorded mean latency (reconciler.engine.throughput)."""
    quantize: dict[str, Any] | None = None
    """The quantize record's report (sensitivity table under `auto`, kept layers under `kept`)."""
    quantization_mode: str = "none"
    profile: dict[str, Any] | None = None
    """The default variant's per-layer profile (evaluate's profile.json), when its runtime gave one."""
    history: list[AuditEntry] = field(default_factory=list)
    """Oldest first."""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """`report --json`: every field, each verdict as the lock (or the ledger) records it."""
        out = asdict(self)
        out["verdicts"] = [v.lock_json() for v in self.verdicts]
        for entry, dumped in zip(self.history, out["history"], strict=True):
            dumped["verdicts"] = [v.to_json() for v in entry.verdicts]
        return out


def _health(lock: LockView, spec: LoadedSpec, notes: list[str]) -> str:
    from reconciler.engine import integrity
    from reconciler.repo import Layout

    problems = integrity.problems(lock.raw, Layout.lock_file(spec.path))
    if problems:
        notes.append(f"the lock file fails its integrity checks, its verdicts are not trusted: {problems[0]}")
        return health.UNKNOWN
    return lock.health or health.of_verdicts(lock.verdicts)


def _revision(root: Path) -> str | None:
    from backends.sdk import process
    from backends.sdk.errors import BackendError

    try:
        done = process.run(["git", "rev-parse", "--short=10", "HEAD"], "git rev-parse", 10, cwd=root)
    except BackendError:
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _records(db: Database | None, lock: LockView, variant: str) -> dict[str, Record]:
    """stage -> the record of the key the lock holds: this machine's (built or pulled here, with its
    full report), else the lock's own (artifacts by digest, found when the store holds their bytes)."""
    locked = lockread.variant(lock, variant)
    out: dict[str, Record] = {}
    for name, stage in locked.stages.items():
        record = db.record(stage.key) if db is not None else None
        record = record or locked.record(name)
        if record is not None:
            out[name] = record
    return out


def _artifact(store: Store, record: Record | None, name: str) -> Path | None:
    meta = (record.artifacts.get(name) if record is not None else None) or {}
    digest = meta.get("digest")
    if not digest or not store.has(digest):
        return None
    path = store.path(digest)
    return path if sha256_file(path) == digest else None  # copied out into the page: verified


def model_edges(model_path: Path, placed: set[str]) -> list[tuple[str, str]]:
    """Producer -> consumer edges between placed nodes, named as the placement names them."""
    import onnx

    from backends.passes.facts import node_names

    model = onnx.load(str(model_path), load_external_data=False)
    names = node_names(model.graph.node)
    producer: dict[str, str] = {}
    for name, node in zip(names, model.graph.node, strict=True):
        for tensor in node.output:
            if tensor:
                producer[tensor] = name
    edges: set[tuple[str, str]] = set()
    for name, node in zip(names, model.graph.node, strict=True):
        for tensor in node.input:
            source = producer.get(tensor)
            if source is not None and source in placed and name in placed and source != name:
                edges.add((source, name))
    return sorted(edges)


TOOL_PLACEMENT = "tool_placement"
"""The compile stage's artifact holding the vendor compiler's own placement, when its backend reads one."""


def _placement(
    store: Store, records: dict[str, Record], stage: str, notes: list[str], artifact: str = "placement"
) -> Placement | None:
    """The placement `stage` (check: the imported model; rewrite: after replacing unsupported ops;
    compile: the vendor compiler's) recorded, with the edges of the model it placed; None (and a note)
    when it is unreadable."""
    path = _artifact(store, records.get(stage), artifact)
    if path is None:
        return None
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        notes.append(f"placement: the {stage} stage's placement.json is unreadable ({exc})")
        return None
    if not isinstance(report, dict) or not isinstance(report.get("nodes"), list):
        notes.append(f"placement: the {stage} stage's placement.json has no node list")
        return None
    model_stage = "import" if stage == "check" else "rewrite"
    model = _artifact(store, records.get(model_stage), "model")
    placed = {str(n.get("name")) for n in report["nodes"]}
    edges: list[tuple[str, str]] = []
    if model is None:
        notes.append("placement: the model is not in the local store, so the graph has no edges")
    else:
        try:
            edges = model_edges(model, placed)
        except Exception as exc:  # a model onnx cannot read still has a placement worth showing
            notes.append(f"placement: edges unavailable ({type(exc).__name__}: {exc})")
    return Placement(report, edges, stage)


def _placements(
    store: Store, records: dict[str, Record], notes: list[str]
) -> tuple[Placement | None, Placement | None]:
    """(what the compiler receives: after rewrite when it ran, else check; before the rewrite, when the
    rewrite changed the placement). Where the vendor compiler reported its own placement, that one is
    shown first and the op table's beside it when the two differ: the compiler's wins."""
    after = _placement(store, records, "rewrite", notes)
    before = _placement(store, records, "check", notes)
    tool = _placement(store, records, "compile", notes, TOOL_PLACEMENT)
    if tool is not None:
        table = after or before
        return tool, table if table is not None and _devices(table) != _devices(tool) else None
    if after is None and before is None:
        notes.append("placement: no placement.json recorded (the check stage has not run here)")
        return None, None
    if after is None:
        return before, None
    changed = before is not None and _devices(before) != _devices(after)
    return after, before if changed else None


def _devices(placement: Placement) -> list[tuple[str, str]]:
    return [(str(n.get("name")), str(n.get("device"))) for n in placement.report.get("nodes", [])]


def _history(root: Path, spec: LoadedSpec, notes: list[str]) -> list[AuditEntry]:
    try:
        entries = run(root, [spec.path], Filters(spec=spec.name)).entries
    except Exception as exc:  # git missing or unreadable: the rest of the report still stands
        notes.append(f"SLO history unavailable: {type(exc).__name__}: {exc}")
        return []
    return list(reversed(entries))


def _profile(store: Store, record: Record | None, notes: list[str]) -> dict[str, Any] | None:
    path = _artifact(store, record, "profile")
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        notes.append(f"profile: profile.json unreadable ({exc})")
        return None
    return data if isinstance(data, dict) else None


def _lock(spec: LoadedSpec) -> LockView:
    lock = lockread.read(Layout.lock_file(spec.path))
    if lock is None:
        raise LookupError(
            f"{spec.name}: no lock file ({Layout.lock_file(spec.path).name}): run `npuctl apply` first"
        )
    return lock


def _variant_records(layout: Layout, lock: LockView, variants: list[str]) -> dict[str, dict[str, Record]]:
    """variant -> stage -> the record of the key the lock holds (`_records`)."""
    db = Database(layout.database) if layout.database.exists() else None
    try:
        return {v: _records(db, lock, v) for v in variants}
    finally:
        if db is not None:
            db.close()


def _summary(
    root: Path, spec: LoadedSpec, lock: LockView, variants: list[str], notes: list[str]
) -> ReportData:
    """The page's head, verdicts and measurements: what the lock file alone says."""
    imported = lock.variant("default").stages.get("import")
    model = imported.artifacts.get("model") if imported is not None else None
    measured = {name: lock.variants[name].raw_measurements for name in variants}
    for name in variants:
        slower = slower_than_float(measured[name])
        if slower is not None:
            notes.append(f"{name}: {slower}")
    return ReportData(
        spec=spec.name,
        target=spec.target,
        file=str(spec.path.relative_to(root)) if spec.path.is_relative_to(root) else str(spec.path),
        status=_health(lock, spec, notes),
        sync=lock.sync or health.UNKNOWN,
        model_version=lock.model.version,
        model_digest=model.digest if model is not None else None,
        generated=datetime.now(timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        revision=_revision(root),
        verdicts=[v for name in variants for v in lock.variants[name].verdicts],
        measurements=measured,
        throughput_fps=throughput.from_lock(lock),
        quantization_mode=str((spec.field("quantization") or {}).get("mode", "none")),
        notes=notes,
    )


def _latencies(records: dict[str, dict[str, Record]]) -> dict[str, dict[str, Any]]:
    """variant -> evaluate's latency report, for the variants whose report holds raw samples."""
    out: dict[str, dict[str, Any]] = {}
    for variant, recs in records.items():
        evaluate = recs.get("evaluate")
        latency = (evaluate.report.get("latency_ms") if evaluate is not None else None) or {}
        if latency.get("samples"):
            out[variant] = latency
    return out


def _quantize(data: ReportData, quantize: Record, notes: list[str]) -> None:
    """The mode the quantize record was built with, its report (unless it passed the model through),
    and a note for each range problem its placement found."""
    built_with = (quantize.key_inputs.get("fields") or {}).get("quantization") or {}
    data.quantization_mode = str(built_with.get("mode", data.quantization_mode))
    if not quantize.note.startswith("identity") and not lockread.is_lock_record(quantize):
        data.quantize = quantize.report
    notes.extend(_range_notes((quantize.report or {}).get("placement") or {}))


def _range_notes(placement: dict[str, Any]) -> list[str]:
    """Inputs of one node whose ranges lie far apart, and channels under one scale that do."""
    notes = [
        f"quantize range mixing: {m.get('node')} ({m.get('output')}): input ranges "
        f"{float(m.get('ratio', 0)):.0f}x apart, {m.get('fix')}"
        for m in placement.get("range_mixing") or []
    ]
    spread = placement.get("channel_ranges") or []
    if spread:
        named = ", ".join(
            f"{c.get('tensor')} (into {c.get('consumer')}) {float(c.get('ratio', 0)):.0f}x" for c in spread
        )
        notes.append(
            f"quantize channel ranges: {len(spread)} activations with channels over 16x apart under one "
            f"scale: {named}; {spread[0].get('fix')}"
        )
    return notes


def _spec_changed(lock: LockView, spec: LoadedSpec) -> bool:
    recorded = lock.sources.spec_digest if lock.sources is not None else None
    return bool(recorded) and recorded != spec_digest(spec)


def _untrusted(data: ReportData, trust: Trust, lock: LockView, variants: list[str], notes: list[str]) -> None:
    """Verdicts on records not from a trusted builder read unknown (reconciler.trust), and say why."""
    shown = lockread.view(trust.vetted(lock.raw))
    if shown is None or shown.raw == lock.raw:
        return
    data.verdicts = [v for name in variants for v in shown.variant(name).verdicts]
    data.status = health.UNKNOWN
    notes.append(f"some records are {UNTRUSTED}: their verdicts read unknown (docs/trust.md)")


def gather(root: Path, spec: LoadedSpec) -> ReportData:
    """Everything the page shows; raises LookupError when the spec has never been applied."""
    layout = Layout(root)
    lock = _lock(spec)
    notes: list[str] = []
    variants = sorted(lock.variants, key=lambda v: (v != "default", v))
    trust = Trust.here(policy.read(root))
    records = _variant_records(layout, lock.vetted(trust.distrusted), variants)
    default = records.get("default") or {}
    store = Store(layout.store)
    if not any(store.has(a["digest"]) for r in default.values() for a in r.artifacts.values()):
        notes.append(
            "the build's files are not on this machine (applied elsewhere): `npuctl pull` them from the "
            "remote cache, or `npuctl apply` here, for the placement, latency and profile"
        )
    data = _summary(root, spec, lock, variants, notes)
    _untrusted(data, trust, lock, variants, notes)
    if any(store.has((r.artifacts.get("placement") or {}).get("digest", "")) for r in default.values()):
        data.placement, data.placement_before = _placements(store, default, notes)
    data.latency = _latencies(records)
    data.profile = _profile(store, default.get("evaluate"), notes)
    evaluate = default.get("evaluate")
    if evaluate is not None and not lockread.is_lock_record(evaluate) and not data.latency:
        notes.append("latency: the evaluate record has no raw samples")
    if "quantize" in default:
        _quantize(data, default["quantize"], notes)
    if _spec_changed(lock, spec):
        notes.append("the spec changed since its last apply: this page shows the results in the lock file")
    data.history = _history(root, spec, notes)
    return data
