"""The state handles one run works with, opened once and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends import pathpolicy
from reconciler.repo import Layout
from reconciler.state.db import Database, Record
from reconciler.state.hashcache import FileHasher
from reconciler.state.store import Store


@dataclass
class Workspace:
    layout: Layout
    db: Database
    store: Store
    hasher: FileHasher

    @classmethod
    def open(cls, root: Path) -> Workspace:
        layout = Layout(root)
        pathpolicy.check_state_dir(layout.state_dir)
        layout.state_dir.mkdir(parents=True, exist_ok=True)
        gitignore = layout.state_dir / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("*\n")
        db = Database(layout.database)
        return cls(layout, db, Store(layout.store), FileHasher(db, layout.root))

    def close(self) -> None:
        self.hasher.flush()
        self.db.close()

    def usable(self, record: Record | None) -> bool:
        """A record counts only while every artifact it names is in the store."""
        return record is not None and all(self.store.has(a["digest"]) for a in record.artifacts.values())
