"""Lock files through git history, and the work tree's uncommitted ones.

`repo.iter_commits(paths=...)` gives the commits touching the spec folders; in each, every lock file
whose blob differs from the first parent's is one entry. A merge whose lock blob equals one of its
parents' brought nothing new (the branch commit already has the entry) and is skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from reconciler.audit.entries import AuditEntry, from_lock

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


def _commit_entries(commit: git.Commit, folders: list[str]) -> Iterator[AuditEntry]:
    parents = list(commit.parents)
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
        entry = from_lock(lock, "commit", commit.hexsha[:10], time, path, commit.hexsha)
        entry.author = str(commit.author.name or "")
        entry.subject = str(commit.summary)
        yield entry


def commits(repo: git.Repo, folders: list[str], rev: str = "HEAD") -> list[AuditEntry]:
    """Entries of every commit reachable from `rev` that changed a lock file in `folders`, newest first."""
    if not repo.head.is_valid():
        return []
    pathspecs = [f or "." for f in folders]
    out: list[AuditEntry] = []
    for commit in repo.iter_commits(rev, paths=pathspecs):
        out.extend(_commit_entries(commit, folders))
    return out


def _relative(path: Path, root: Path) -> str:
    return PurePosixPath(path.resolve().relative_to(root.resolve())).as_posix()


def working_tree(root: Path, lock_files: list[Path], repo: git.Repo | None) -> list[AuditEntry]:
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
        out.append(from_lock(lock, "working tree", "working tree", mtime, relative))
    return out
