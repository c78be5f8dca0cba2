"""Gathering, filtering and summarizing audit entries.

Two questions get a direct answer:
- which model version meets which SLO: per spec, target and model version, the newest verdict of each SLO;
- since which commit has a spec failed: the oldest entry of its current run of non-passing entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.audit import history, ledger
from reconciler.audit.entries import CANCELLED, AuditEntry
from reconciler.records.judged import Judged
from reconciler.repo import Layout
from reconciler.trust.signing import Trust


class AuditError(Exception):
    """A bad filter value or an unreadable repository; one line for the user."""


def parse_date(text: str, end: bool = False) -> datetime:
    """ISO date or date-time; a bare date as --until means the end of that day. Local time if naive."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise AuditError(f"{text!r} is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]") from exc
    if end and len(text.strip()) == 10:
        value = datetime.combine(value.date(), time.max)
    if value.tzinfo is None:
        value = value.astimezone()
    return value


@dataclass(frozen=True)
class Filters:
    spec: str | None = None
    model: str | None = None
    """A digest prefix (ONNX file sha256, imported model digest or import key) or a model.version label."""
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, entry: AuditEntry) -> bool:
        if self.spec is not None and entry.spec != self.spec:
            return False
        if self.target is not None and entry.target != self.target:
            return False
        if self.model is not None and not _model_matches(self.model, entry):
            return False
        if self.since is not None and entry.time < self.since:
            return False
        return not (self.until is not None and entry.time > self.until)

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "model": self.model,
            "target": self.target,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }


def _model_matches(wanted: str, entry: AuditEntry) -> bool:
    wanted = wanted.strip().lower()
    if wanted == (entry.model_version or "").lower():
        return True
    if len(wanted) < 4:
        return False
    digests = (entry.model_file_digest, entry.model_digest, entry.import_key)
    return any(d is not None and d.lower().startswith(wanted) for d in digests)


@dataclass
class SummaryRow:
    spec: str
    target: str
    model: str
    model_version: str | None
    model_digest: str | None
    latest: str
    """Label of the newest entry for this model version and settings."""
    state: str
    verdicts: dict[str, Judged]
    """"name [variant]" -> the newest verdict for this model version."""
    settings: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "spec": self.spec,
            "target": self.target,
            "model": self.model,
            "model_version": self.model_version,
            "model_digest": self.model_digest,
            "latest": self.latest,
            "state": self.state,
            "verdicts": {name: v.to_json() for name, v in self.verdicts.items()},
        }


@dataclass
class Streak:
    spec: str
    state: str
    """pass | fail | unverified: the state of the newest entry."""
    since: AuditEntry | None
    """The first entry (oldest) of the current non-passing run; None when the newest entry passes."""
    length: int

    def to_json(self) -> dict[str, Any]:
        since = self.since
        return {
            "spec": self.spec,
            "state": self.state,
            "since": None
            if since is None
            else {
                "label": since.label,
                "commit": since.commit,
                "time": since.time.isoformat(),
                "subject": since.subject,
            },
            "entries": self.length,
        }


@dataclass
class Audit:
    entries: list[AuditEntry]
    filters: Filters
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> list[SummaryRow]:
        rows: dict[tuple[Any, ...], SummaryRow] = {}
        for entry in self.entries:  # newest first: the first seen is the latest
            if entry.attempt is not None:
                continue
            group = (entry.spec, entry.target, entry.model, tuple(sorted(entry.settings.items())))
            if group in rows:
                continue
            verdicts = {
                (v.name if v.variant in ("", "default") else f"{v.name} [{v.variant}]"): v
                for v in entry.verdicts
            }
            rows[group] = SummaryRow(
                entry.spec,
                entry.target,
                entry.model,
                entry.model_version,
                entry.model_file_digest or entry.model_digest,
                entry.label,
                entry.state,
                verdicts,
                dict(entry.settings),
            )
        return sorted(rows.values(), key=lambda r: (r.spec, r.target))

    def streaks(self) -> list[Streak]:
        """Per spec, from the committed history (and the working tree): the current failing run."""
        out = []
        for spec in sorted({e.spec for e in self.entries}):
            timeline = [
                e for e in self.entries if e.spec == spec and e.source != "ledger" and e.state != CANCELLED
            ]
            if not timeline:
                continue
            newest = timeline[0].state
            run: list[AuditEntry] = []
            for entry in timeline:
                if entry.state == Verdict.PASS.word:
                    break
                run.append(entry)
            out.append(Streak(spec, newest, run[-1] if run else None, len(run)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "command": "audit",
            "filters": self.filters.to_json(),
            "entries": [e.to_json() for e in self.entries],
            "summary": [r.to_json() for r in self.summary()],
            "failing": [s.to_json() for s in self.streaks()],
            "warnings": self.warnings,
        }


def _history(
    repo: Any, folders: list[str], rev: str | None, warnings: list[str], trust: Trust
) -> list[AuditEntry]:
    from reconciler.gitops.gitref import GitError, resolve

    if rev is not None:
        try:
            resolve(repo, rev)
        except GitError as exc:
            raise AuditError(str(exc)) from exc
    entries = history.commits(repo, folders, trust, rev or "HEAD")
    shallow = history.shallow_note(repo, rev or "HEAD")
    if shallow:
        warnings.append(shallow)
    return entries


def _order(entries: list[AuditEntry]) -> list[AuditEntry]:
    """Working tree first, then commits in history order (newest first), local applies by time."""
    rank = {"working tree": 0, "commit": 1, "ledger": 2}
    commits = [e for e in entries if e.source == "commit"]
    others = sorted(
        (e for e in entries if e.source != "commit"), key=lambda e: (rank[e.source], -e.time.timestamp())
    )
    work = [e for e in others if e.source == "working tree"]
    local = [e for e in others if e.source == "ledger"]
    return work + commits + local


def _folders(root: Path, paths: list[Path]) -> list[str]:
    from reconciler.gitops.gitref import GitError, repo_relative

    out = []
    for path in paths or [Layout(root).default_specs()]:
        try:
            relative = repo_relative(path, root)
        except GitError as exc:
            raise AuditError(str(exc)) from exc
        absolute = root / relative
        if absolute.is_file() or relative.suffix in (".yaml", ".yml"):
            relative = Layout.lock_file(relative) if not relative.name.endswith(".lock.json") else relative
        out.append(relative.as_posix())
    return out


def _work_tree_locks(root: Path, folders: list[str]) -> list[Path]:
    out: list[Path] = []
    for folder in folders:
        path = root / folder
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out.extend(p for p in path.glob("*" + history.LOCK_SUFFIX) if p.is_file())
    return out


def run(root: Path, paths: list[Path], filters: Filters, rev: str | None = None) -> Audit:
    """Every entry under `paths` (default specs/) matching `filters`, newest first; the history of
    `rev` (a branch, tag or sha; default HEAD, with the work tree's uncommitted lock files)."""
    import git

    from reconciler.state.db import Database
    from reconciler.trust import policy

    trust = Trust.here(policy.read(root))  # who signed each verdict; unknown when nobody trusted did
    folders = _folders(root, paths)
    warnings: list[str] = []
    repo: git.Repo | None
    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        repo, warnings = None, [f"{root} is not a git repository: only the work tree and the ledger are read"]
    try:
        entries = _history(repo, folders, rev, warnings, trust) if repo is not None else []
        if rev is None:
            entries = history.working_tree(root, _work_tree_locks(root, folders), repo, trust) + entries
    finally:
        if repo is not None:
            repo.close()
    layout = Layout(root)
    if layout.database.exists():
        db = Database(layout.database)
        try:
            entries = ledger.merge(db, entries)
        finally:
            db.close()
    selected = [e for e in _order(entries) if filters.matches(e)]
    return Audit(selected, filters, warnings)
