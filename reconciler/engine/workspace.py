"""The state handles one run works with, opened once and passed explicitly.

Store objects are verified against their digest whenever a record's outputs are about to be used
(as a later stage's input, a cache hit, or an artifact copied out): cheaply, through the file-hash
cache (a re-read only when the object's inode, size or mtime changed since it was last verified). A
corrupt object is moved to `.npuctl/corrupt/` and its record counts as absent, so the stage that made
it is rebuilt and nothing is ever built from it: a flipped byte never spreads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk import pathpolicy
from backends.sdk.child_call import Child
from reconciler.repo import Layout
from reconciler.state import lockread, scratch, statcache
from reconciler.state.db import Database, Record
from reconciler.state.hashcache import FileHasher
from reconciler.state.lockread import LockIndex, LockView
from reconciler.state.store import Store
from reconciler.trust import policy
from reconciler.trust.signing import Trust

if TYPE_CHECKING:
    from reconciler.remote import Remote


def _writable(state_dir: Path) -> bool:
    """Whether the state folder exists, or can be made, and can be written (os.access says EROFS for
    a read-only mount even to root)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(state_dir, os.W_OK)


@dataclass
class Workspace:
    layout: Layout
    db: Database
    store: Store
    hasher: FileHasher
    child: Child = field(default_factory=Child)
    """The child interpreter stages run in (started on first use, one per run)."""
    locks: LockIndex = field(default_factory=LockIndex)
    """The stage keys every committed lock file of this run's specs records (see engine.resolve)."""
    remote: Remote | None = None
    """The shared remote cache, looked up after the local store (reconciler.remote); None: none."""
    trust: Trust = field(default_factory=lambda: Trust(policy.Policy()))
    """Whose records count (the repository's trust policy and this machine's key; reconciler.trust)."""
    remote_fetch: bool = True
    """Whether a remote hit downloads its artifacts (apply) or only reads the record (plan)."""

    @classmethod
    def open(cls, root: Path, reading: bool = False) -> Workspace:
        """The repository's state. `reading` (plan, status): when the state folder cannot be written (a
        read-only checkout), a private in-memory copy of its database stands in, and nothing is written."""
        layout = Layout(root)
        pathpolicy.check_state_dir(layout.state_dir)
        trust = Trust.here(policy.read(layout.root))
        if reading and not _writable(layout.state_dir):
            db = Database.copy_of(layout.database)
            hasher = FileHasher(db, layout.root)
            return cls(layout, db, Store(layout.store), hasher, read_only=True, trust=trust)
        layout.state_dir.mkdir(parents=True, exist_ok=True)
        gitignore = layout.state_dir / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("*\n")
        db = Database(layout.database)
        ws = cls(layout, db, Store(layout.store), FileHasher(db, layout.root), trust=trust)
        ws._undo_tmp = scratch.redirect(layout.tmp)
        return ws

    def close(self) -> None:
        """Saves the file-hash cache (best effort: a full or read-only disk only costs the next run a
        re-hash, named in `close_warning`), then closes the child, the database and the scratch."""
        try:
            try:
                self.hasher.flush()
            except Exception as exc:
                from reconciler.engine import faults

                if not faults.is_infrastructure(exc):
                    raise
                cause = faults.describe(exc, self.layout.database)
                self.close_warning = f"{cause} (the file-hash cache was not saved: the next run hashes again)"
            self.child.close()
            self.db.close()
        finally:
            self._undo_tmp()

    _committed: dict[Path, tuple[Any, LockView | None, list[str]]] = field(default_factory=dict, repr=False)

    def committed_lock(self, path: Path, fresh: bool = False) -> tuple[LockView | None, list[str]]:
        """The lock file at `path`, its records not from a trusted builder left out (`self.trust`),
        and its integrity problems, parsed again only when its stat key
        changed (a rewrite renames a new file into place), when `fresh` (apply, under the spec's lock)
        or when the stat caches are off."""
        try:
            stamp: Any = statcache.key(os.stat(path))
        except OSError:
            stamp = None
        known = self._committed.get(path)
        if fresh or known is None or known[0] != stamp or stamp is None or not statcache.enabled():
            from reconciler.engine import integrity
            from reconciler.state import lockfile

            data = lockfile.read(path)
            known = (stamp, lockread.view(data), integrity.problems(data, path))
            self._committed[path] = known
        lock = known[1].vetted(self.trust.distrusted) if known[1] is not None else None
        return lock, known[2]

    def lock_digest(self, path: str) -> str | None:
        """The sha256 of the lock file at `path` as this run parsed it, when its bytes are what npuctl
        writes for that content (lockfile.dumps); None when this run did not parse it."""
        known = self._committed.get(Path(path))
        if known is None or known[1] is None:
            return None
        from reconciler.state import lockfile

        return hashlib.sha256(lockfile.dumps(known[1].raw).encode()).hexdigest()

    read_only: bool = False
    """The state folder cannot be written: the database is an in-memory copy (Database.copy_of)."""
    close_warning: str | None = None
    """Set by close() when the file-hash cache could not be saved (the run's results stand)."""
    quarantined: list[str] = field(default_factory=list)
    """Digests found corrupt (and moved aside) during this run."""
    _undo_tmp: Callable[[], None] = field(default=lambda: None, repr=False)

    def intact(self, digest: str) -> bool:
        """The object is in the store and its content still hashes to its name; a corrupt one is
        quarantined (so the next check, and every other process, sees it absent)."""
        path = self.store.path(digest)
        try:
            actual = self.hasher.stored(path)
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            if not path.is_file():
                return False
            actual = ""
        if actual == digest:
            return True
        self.hasher.forget(path)
        self.store.quarantine(digest, self.layout.state_dir / "corrupt")
        self.quarantined.append(digest)
        return False

    def usable(self, record: Record | None) -> bool:
        """A record counts only while every artifact it names is in the store, intact."""
        return record is not None and all(self.intact(a["digest"]) for a in record.artifacts.values())

    repair: bool = False
    """Set by fsck: a stage built here whose output left the store is rebuilt even when the lock file
    alone would do (apply otherwise rebuilds only what a later stage needs)."""

    def repairing(self, key: str) -> bool:
        return self.repair and self.db.record(key) is not None

    def corrupt_in(self, record: Record | None) -> list[str]:
        """The record's artifacts found corrupt in this run (for the rebuild's reason)."""
        if record is None:
            return []
        return [a["digest"] for a in record.artifacts.values() if a["digest"] in self.quarantined]
