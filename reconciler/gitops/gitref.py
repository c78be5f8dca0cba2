"""Reading a commit's specs and lock files without touching the work tree or the index.

The spec loader works on paths (it follows `extends` and positions errors in files), so the YAML and
lock-file blobs of the commit are written into a temporary folder that mirrors the repository layout.
Nothing is checked out: blobs are read from the object database.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import git

SNAPSHOT_SUFFIXES = (".yaml", ".yml", ".lock.json")
"""Blobs a spec comparison needs: specs, their `extends` bases, and lock files."""
MAX_BLOB_BYTES = 4 << 20
"""Larger blobs are not specs or lock files (the spec loader refuses files over 1 MiB anyway)."""


class GitError(Exception):
    """The repository or a ref cannot be read; one line for the user."""


def open_repo(root: Path) -> git.Repo:
    import git

    try:
        return git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise GitError(f"{root} is not a git repository") from exc


def resolve(repo: git.Repo, ref: str) -> git.Commit:
    """The commit `ref` names (a branch, tag, sha, `HEAD~1`, `origin/main`)."""
    import git

    try:
        return repo.commit(ref)
    except (git.BadName, git.BadObject, ValueError) as exc:
        raise GitError(
            f"unknown git revision {ref!r} (fetch it first, e.g. `{fetch_hint(repo, ref)}`)"
        ) from exc


def fetch_hint(repo: git.Repo, ref: str) -> str:
    """The fetch that brings `ref`: `origin/main` is branch main of remote origin (`git fetch origin main`)."""
    remotes = {r.name for r in repo.remotes} or {"origin"}
    remote, _, branch = ref.partition("/")
    if branch and (remote in remotes or remote == "origin"):
        return f"git fetch {remote} {branch}"
    return f"git fetch origin {ref}"


def blob_text(commit: git.Commit, relative: str) -> str | None:
    """The text of one file at `commit`, or None when it does not exist there."""
    try:
        blob = commit.tree / relative
    except KeyError:
        return None
    if blob.type != "blob":
        return None
    data: bytes = blob.data_stream.read()
    return data.decode("utf-8", errors="replace")


def _wanted(path: str, size: int) -> bool:
    return path.endswith(SNAPSHOT_SUFFIXES) and size <= MAX_BLOB_BYTES


@dataclass
class Snapshot:
    """A commit's specs and lock files under `root` (a temporary folder), same relative paths."""

    ref: str
    commit: str
    root: Path
    files: int

    def path(self, relative: Path | str) -> Path:
        return self.root / relative

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def display(self, text: str) -> str:
        """A message mentioning snapshot paths, rewritten as `REF:relative/path`. The snapshot may lie
        under the working directory (temporary files live in .npuctl/tmp), so messages can name it
        relative to it too."""
        out = text.replace(str(self.root) + os.sep, f"{self.ref}:")
        try:
            relative = str(self.root.relative_to(Path.cwd().resolve()))
        except ValueError:
            return out
        return out.replace(relative + os.sep, f"{self.ref}:")


def snapshot(repo: git.Repo, ref: str) -> Snapshot:
    """Materialize the YAML and lock-file blobs of `ref` into a fresh temporary folder."""
    import git

    commit = resolve(repo, ref)
    root = Path(tempfile.mkdtemp(prefix="npuctl-base-")).resolve()
    count = 0
    try:
        for item in commit.tree.traverse():
            if not isinstance(item, git.Blob) or not _wanted(str(item.path), item.size):
                continue
            dest = root / str(item.path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(item.data_stream.read())
            count += 1
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Snapshot(ref, commit.hexsha, root, count)


def repo_relative(path: Path, root: Path) -> Path:
    """`path` (absolute or relative to the working directory) relative to the repository root."""
    resolved = (path if path.is_absolute() else Path.cwd() / path).resolve()
    try:
        return resolved.relative_to(root.resolve())
    except ValueError as exc:
        raise GitError(f"{path} is outside the repository {root}") from exc
