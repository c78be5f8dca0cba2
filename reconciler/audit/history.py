"""Lock files through git history, and the work tree's uncommitted ones.

`repo.iter_commits(paths=...)` gives the commits touching the spec folders; in each, every lock file
whose blob differs from the first parent's is one entry. A merge whose lock blob equals one of its
parents' brought nothing new (the branch commit already has the entry) and is skipped.

A shallow clone (CI's default) ends at its boundary commits, whose parents are named but absent: they
count as roots (every lock file they hold is an entry), and `shallow_note` says how far history reaches
and the exact command that deepens it. Rebased or amended history is read as it is now: the ledger's
local applies still match the rewritten commits by their results.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from reconciler.audit.entries import AuditEntry, from_lock
from reconciler.trust.signing import Trust

if TYPE_CHECKING:
    import git

LOCK_SUFFIX = ".lock.json"


def _lock_paths(commit: git.Commit, folders: list[str]) -> list[str]:
    """Lock files directly inside the folders (specs are discovered non-recursively), or named ones."""
    out: list[str] = []
    for folder in folders:
        if folder.endswith(LOCK_SUFFIX):
            out.append(folder)
            continue
        try:
            tree = commit.tree / folder if folder not in ("", ".") else commit.tree
        except KeyError:
            continue
        if tree.type != "tree":
            continue
        out.extend(str(blob.path) for blob in tree.blobs if blob.name.endswith(LOCK_SUFFIX))
    return sorted(set(out))


def _blob(commit: git.Commit, path: str) -> Any:
    try:
        item = commit.tree / path
    except KeyError:
        return None
    return item if item.type == "blob" else None


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def shallow_boundary(repo: git.Repo) -> set[str]:
    """The commits at which a shallow clone's history stops (`.git/shallow`); empty when complete."""
    try:
        text = (Path(repo.git_dir) / "shallow").read_text()
    except OSError:
        return set()
    return {line.strip() for line in text.splitlines() if line.strip()}


def shallow_note(repo: git.Repo, rev: str = "HEAD") -> str | None:
    """What history a shallow clone holds and how to get more, or None for a complete clone."""
    boundary = shallow_boundary(repo)
    if not boundary:
        return None
    reachable = sum(1 for _ in repo.iter_commits(rev))
    oldest = min((repo.commit(sha) for sha in boundary), key=lambda c: c.committed_date)
    remote = repo.remotes[0].name if repo.remotes else "origin"
    when = oldest.committed_datetime.strftime("%Y-%m-%d %H:%M")
    return (
        f"shallow clone: history holds {reachable} commit(s) back to {oldest.hexsha[:10]} ({when}); "
        f"older lock files are not shown: run `git fetch --unshallow {remote}` for all of it "
        f"(or `git fetch --deepen=100 {remote}` for 100 more commits)"
    )


def _parents(commit: git.Commit, boundary: set[str]) -> list[git.Commit]:
    if commit.hexsha in boundary:
        return []
    return list(commit.parents)


def _commit_entries(
    commit: git.Commit, folders: list[str], boundary: set[str], trust: Trust
) -> Iterator[AuditEntry]:
    parents = _parents(commit, boundary)
    time = commit.committed_datetime
    for path in _lock_paths(commit, folders):
        blob = _blob(commit, path)
        if blob is None:
            continue
        parent_shas = [getattr(_blob(p, path), "hexsha", None) for p in parents]
        if parents and parent_shas[0] == blob.hexsha:
            continue
        if len(parents) > 1 and blob.hexsha in parent_shas:
            continue
        lock = _parse(blob.data_stream.read())
        if lock is None:
            continue
        entry = from_lock(lock, "commit", commit.hexsha[:10], time, path, trust, commit.hexsha)
        entry.author = str(commit.author.name or "")
        entry.subject = str(commit.summary)
        yield entry


def commits(repo: git.Repo, folders: list[str], trust: Trust, rev: str = "HEAD") -> list[AuditEntry]:
    """Entries of every commit reachable from `rev` that changed a lock file in `folders`, newest first."""
    if not repo.head.is_valid():
        return []
    pathspecs = [f or "." for f in folders]
    boundary = shallow_boundary(repo)
    out: list[AuditEntry] = []
    for commit in repo.iter_commits(rev, paths=pathspecs):
        out.extend(_commit_entries(commit, folders, boundary, trust))
    return out


def _relative(path: Path, root: Path) -> str:
    return PurePosixPath(path.resolve().relative_to(root.resolve())).as_posix()


def working_tree(root: Path, lock_files: list[Path], repo: git.Repo | None, trust: Trust) -> list[AuditEntry]:
    """Lock files whose work-tree content differs from HEAD's (or that git does not know yet)."""
    head = repo.head.commit if repo is not None and repo.head.is_valid() else None
    out = []
    for path in sorted(lock_files):
        relative = _relative(path, root)
        text = path.read_bytes()
        blob = _blob(head, relative) if head is not None else None
        if blob is not None and blob.data_stream.read() == text:
            continue
        lock = _parse(text)
        if lock is None:
            continue
        mtime = datetime.fromtimestamp(os.stat(path).st_mtime, tz=timezone.utc).astimezone()
        out.append(from_lock(lock, "working tree", "working tree", mtime, relative, trust))
    return out
