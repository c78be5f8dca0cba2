"""One spec's lock file as a past commit recorded it, read from git's object database (no checkout).

A spec is named by its `metadata.name` (the lock file records it as `spec`) or by its file's path; at
the revision, its lock file is the blob beside the spec file. What a lock file records (the artifacts'
digests, the measurements, the verdicts) is all a past release's export or comparison needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.gitops.gitref import GitError, blob_text, open_repo, repo_relative, resolve
from reconciler.repo import Layout

LOCK_SUFFIX = ".lock.json"


@dataclass(frozen=True)
class LockAt:
    ref: str
    commit: str
    path: str
    """The lock file, relative to the repository root."""
    lock: dict[str, Any]

    @property
    def label(self) -> str:
        """`REF (abcdef123456)`, or the short commit alone when REF is that commit."""
        short = self.commit[:12]
        return short if self.commit.startswith(self.ref) else f"{self.ref} ({short})"


def _parsed(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GitError(f"{where}: not a lock file ({exc})") from exc
    if not isinstance(data, dict):
        raise GitError(f"{where}: not a lock file")
    return data


def lock_at(root: Path, ref: str, spec: str) -> LockAt:
    """The lock file of `spec` (a name or a spec file path) at revision `ref`; GitError when the
    revision, the spec or its lock file is not there."""
    repo = open_repo(root)
    commit = resolve(repo, ref)
    if spec.endswith((".yaml", ".yml")):
        relative = Layout.lock_file(repo_relative(Path(spec), root)).as_posix()
        text = blob_text(commit, relative)
        if text is None:
            raise GitError(f"{ref}: no lock file {relative} (was {spec} applied and committed then?)")
        return LockAt(ref, commit.hexsha, relative, _parsed(text, f"{ref}:{relative}"))
    default = Layout(root).default_specs().relative_to(root).as_posix() + "/"
    found: list[tuple[str, dict[str, Any]]] = []
    for item in commit.tree.traverse():
        path = str(getattr(item, "path", ""))
        if getattr(item, "type", "") != "blob" or not path.endswith(LOCK_SUFFIX):
            continue
        text = blob_text(commit, path)
        try:
            data = _parsed(text or "", path)
        except GitError:
            continue
        if data.get("spec") == spec:
            found.append((path, data))
    if not found:
        raise GitError(f"{ref}: no lock file records a spec named {spec!r}")
    path, data = sorted(found, key=lambda f: (not f[0].startswith(default), f[0]))[0]
    return LockAt(ref, commit.hexsha, path, data)
