"""`plan --base REF`: each spec of the work tree against the same spec at REF.

Specs are matched by `metadata.name` (state, ledger and lock files are per name). For each: whether it
was added, removed, modified or unchanged; the field-level diff; which stages the current plan rebuilds;
and, once the work tree's lock file has been applied, the SLO table base -> now and the per-layer
profile diff (reconciler.gitops.layers).

"Applied" is decided from local state when there is some (the plan re-judges nothing), else from the
lock file's `sources` (digest of the merged spec and of every input file): CI runs on a fresh checkout
with no store, and must still tell a committed, up-to-date lock file from a stale one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.chain import build_chain, variants
from reconciler.engine.results import SpecResult, StageResult
from reconciler.engine.sources import file_digests, spec_digest
from reconciler.engine.stages import VERIFY
from reconciler.engine.workspace import Workspace
from reconciler.gitops import gitref, layers, slo, specdiff
from reconciler.gitops.slo import SloCount
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec, SpecErrors, check
from reconciler.state import lockfile, lockread
from reconciler.state.lockread import LockView
from reconciler.trust import policy
from reconciler.trust.signing import Trust, short

PENDING = ("build", "rejudge", "stalled")


@dataclass
class SpecComparison:
    name: str
    change: str
    """added | removed | modified | unchanged"""
    file: str
    """The spec file, relative to the repository (the base one for a removed spec)."""
    target: str | None = None
    base_target: str | None = None
    fields: list[specdiff.FieldChange] = field(default_factory=list)
    files: list[specdiff.FieldChange] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)
    """Per variant of the work tree's lock whose records do not count under the base's policy: why."""
    stages: list[StageResult] = field(default_factory=list)
    """The current plan's stages with work to do (not cached, not an idle identity)."""
    cached_stages: int = 0
    identity_stages: int = 0
    applied: bool = False
    """The work tree's lock file matches the spec and its inputs, so `slo` compares real results."""
    has_lock: bool = False
    slo: list[slo.SloRow] = field(default_factory=list)
    slo_base: SloCount = field(default_factory=lambda: SloCount(0, 0))
    slo_now: SloCount = field(default_factory=lambda: SloCount(0, 0))
    errors: list[str] = field(default_factory=list)
    base_errors: list[str] = field(default_factory=list)
    layers: list[layers.VariantLayers] = field(default_factory=list)
    """Per variant whose profile changed (applied lock files only), the layer diff base -> now."""

    @property
    def rebuilds(self) -> list[str]:
        """Stage names to rebuild (any variant), in chain order."""
        seen: list[str] = []
        for stage in self.stages:
            if stage.action in ("build", "stalled") and stage.name not in seen:
                seen.append(stage.name)
        return seen

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "file": self.file,
            "target": self.target,
            "base_target": self.base_target,
            "fields": [c.to_json() for c in self.fields],
            "files": [c.to_json() for c in self.files],
            "rebuild": self.rebuilds,
            "stages": [s.to_json() for s in self.stages],
            "applied": self.applied,
            "has_lock": self.has_lock,
            "slo": [row.to_json() for row in self.slo],
            "slo_summary": {
                "base": {"passed": self.slo_base[0], "total": self.slo_base[1]},
                "now": {"passed": self.slo_now[0], "total": self.slo_now[1]},
            },
            "errors": self.errors,
            "base_errors": self.base_errors,
            "untrusted": self.untrusted,
            "layers": [v.to_json() for v in self.layers],
        }


@dataclass
class PolicyChange:
    """How the work tree's trust policy differs from the base's: keys added and removed, by name."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed}


@dataclass
class Comparison:
    ref: str
    commit: str
    specs: list[SpecComparison]
    policy: PolicyChange | None = None
    """Set when the change edits the trust policy (whose keys count only once it is merged)."""

    def to_json(self) -> dict[str, Any]:
        out = {"ref": self.ref, "commit": self.commit, "specs": [s.to_json() for s in self.specs]}
        return {**out, "policy_change": self.policy.to_json() if self.policy else None}


def base_policy(root: Path, ref: str) -> policy.Policy:
    """The trust policy at REF. A pull request is judged by the policy of the branch it merges into,
    so adding its own key to the policy does not make its records count. Raises gitref.GitError."""
    repo = gitref.open_repo(root)
    try:
        relative = gitref.repo_relative(root / policy.FILE, root)
        text = gitref.blob_text(gitref.resolve(repo, ref), str(relative))
    finally:
        repo.close()
    return policy.parse(text, f"{ref}:{relative}") if text is not None else policy.Policy()


def policy_change(base: policy.Policy, now: policy.Policy) -> PolicyChange | None:
    def named(p: policy.Policy, keys: set[str]) -> list[str]:
        return sorted(f"{p.names[k]} ({short(k)})" for k in keys)

    if base.names == now.names:
        return None
    added, removed = set(now.names) - set(base.names), set(base.names) - set(now.names)
    renamed = {k for k in set(now.names) & set(base.names) if now.names[k] != base.names[k]}
    return PolicyChange(named(now, added | renamed), named(base, removed | renamed))


@dataclass
class _Side:
    spec: LoadedSpec | None
    file: Path
    errors: list[str]
    target: str | None = None


def _base_side(snap: gitref.Snapshot, relative_paths: list[Path]) -> dict[str, _Side]:
    existing = [snap.path(p) for p in relative_paths if snap.path(p).exists()]
    out: dict[str, _Side] = {}
    for report in check(existing, snap.root, semantic=False) if existing else []:
        name = report.name or report.file.name.split(".")[0]
        errors = [snap.display(str(e)) for e in report.errors]
        spec = report.spec if report.valid else None
        target = report.spec.target if report.spec is not None else None
        out.setdefault(name, _Side(spec, report.file, errors, target))
    return out


def _current_side(specs: list[LoadedSpec], results: list[SpecResult]) -> dict[str, _Side]:
    out = {spec.name: _Side(spec, spec.path, [], spec.target) for spec in specs}
    for result in results:
        if result.name not in out:
            out[result.name] = _Side(None, Path(result.file), list(result.errors), result.target or None)
    return out


def _current_files(ws: Workspace, spec: LoadedSpec) -> dict[str, str | None] | None:
    try:
        return file_digests(build_chain(spec, variants(spec)[0], ws.layout.root, ws.hasher))
    except SpecErrors:
        return None


def is_applied(
    spec: LoadedSpec,
    lock: LockView | None,
    result: SpecResult | None,
    files: dict[str, str | None] | None,
) -> bool:
    """Whether `lock` holds the results of this very spec and input files."""
    if lock is None:
        return False
    verify = [s for s in (result.stages if result else []) if s.name == VERIFY]
    if verify and all(s.action == "cached" for s in verify):
        return True
    sources = lock.sources
    if sources is None or files is None:
        return False
    return sources.spec_digest == spec_digest(spec) and sources.files == files


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _readable(path: Path, trust: Trust) -> LockView | None:
    """The lock file at `path`, or None when there is none or it cannot be read: the spec's plan
    result then carries the error (Stalled), and the comparison shows no recorded verdicts. Verdicts
    on records not from a trusted builder read unknown (reconciler.trust)."""
    try:
        data = lockfile.read(path)
    except lockfile.LockUnreadable:
        return None
    read = lockread.view(trust.vetted(data))
    return read.vetted(trust.distrusted) if read is not None else None


def _compare_one(
    name: str,
    base: _Side | None,
    now: _Side | None,
    result: SpecResult | None,
    ws: Workspace,
    snap: gitref.Snapshot,
) -> SpecComparison:
    out = _named(name, base, now, ws.layout.root, snap)
    base_lock = _readable(Layout.lock_file(base.file), ws.trust) if base else None
    lock = _readable(Layout.lock_file(now.file), ws.trust) if now else None
    out.untrusted = [
        f"{n}: {v.untrusted}" for n, v in sorted((lock.variants if lock else {}).items()) if v.untrusted
    ]
    out.has_lock = lock is not None
    base_spec = base.spec if base else None
    now_spec = now.spec if now else None
    files = _current_files(ws, now_spec) if now_spec else None
    if now_spec:
        out.applied = is_applied(now_spec, lock, result, files)
    if result is not None:
        _count_stages(out, result)
    if base_spec and now_spec:
        out.fields = specdiff.diff(base_spec, now_spec)
    base_sources = base_lock.sources if base_lock is not None else None
    out.files = specdiff.file_changes(base_sources.files if base_sources is not None else None, files)
    _compare_results(out, base_lock, lock if out.applied else None, ws, result)
    out.change = _change(base, now, out, _raw(base_lock) != _raw(lock))
    return out


def _named(
    name: str, base: _Side | None, now: _Side | None, root: Path, snap: gitref.Snapshot
) -> SpecComparison:
    """The comparison's file, targets and load errors on each side (the work tree's file when it has one)."""
    file = _relative(now.file, root) if now else _relative(base.file, snap.root) if base else name
    out = SpecComparison(name, "unchanged", file)
    if now is not None:
        out.target = now.target
        out.errors = list(now.errors)
    if base is not None:
        out.base_target = base.target
        out.base_errors = list(base.errors)
    return out


def _count_stages(out: SpecComparison, result: SpecResult) -> None:
    """The current plan's stages with work to do, and how many are cached or idle identities."""
    out.stages = [s for s in result.stages if s.action in PENDING and not s.identity]
    out.cached_stages = sum(1 for s in result.stages if s.action == "cached" and not s.identity)
    out.identity_stages = sum(1 for s in result.stages if s.identity)


def _compare_results(
    out: SpecComparison,
    base_lock: LockView | None,
    applied: LockView | None,
    ws: Workspace,
    result: SpecResult | None = None,
) -> None:
    """SLO table and per-layer profile diff, base -> now; `applied` is the work tree's lock file only
    when it holds the results of the spec as it is (else the current side shows none). The plan's
    verdicts carry the spec's thresholds as it is now."""
    bounds = {(v.variant, v.name): (v.comparison, v.threshold) for v in (result.slo if result else [])}
    out.slo = slo.table(base_lock, applied, bounds)
    out.slo_base = slo.summary(base_lock)
    out.slo_now = slo.summary(applied)
    out.layers = layers.compare_locks(
        base_lock, applied, lambda d: ws.store.path(d) if ws.intact(d) else None
    )


def _raw(lock: LockView | None) -> dict[str, Any] | None:
    return lock.raw if lock is not None else None


def _change(base: _Side | None, now: _Side | None, out: SpecComparison, lock_differs: bool) -> str:
    """added | removed | modified (a field, an input file, the lock file or the spec's validity
    differs) | unchanged."""
    if base is None:
        return "added"
    if now is None:
        return "removed"
    if out.fields or out.files or lock_differs or (base.spec is None) != (now.spec is None):
        return "modified"
    return "unchanged"


def compare(
    ws: Workspace,
    paths: list[Path],
    ref: str,
    specs: list[LoadedSpec],
    results: list[SpecResult],
) -> Comparison:
    """Every spec under `paths` (work tree) against REF. Raises gitref.GitError for a bad repo or ref."""
    root = ws.layout.root
    relative = [gitref.repo_relative(p, root) for p in (paths or [Layout(root).default_specs()])]
    repo = gitref.open_repo(root)
    try:
        with gitref.snapshot(repo, ref) as snap:
            base = _base_side(snap, relative)
            now = _current_side(specs, results)
            by_name = {r.name: r for r in results}
            order = [*now, *(n for n in base if n not in now)]
            compared = [_compare_one(n, base.get(n), now.get(n), by_name.get(n), ws, snap) for n in order]
            change = policy_change(ws.trust.policy, policy.read(root))
            return Comparison(ref, snap.commit, compared, change)
    finally:
        repo.close()
