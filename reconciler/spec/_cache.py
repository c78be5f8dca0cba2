"""Validated specs, cached by the stat of every file they were read from, so an unchanged spec costs a
few stats and a lookup instead of a YAML parse, an `extends` merge and a pydantic validation.

One JSON file, `.npuctl/cache/specs.json`, holds an entry per spec file: the stat keys of the spec and
of every file it extends, the validated JSON, and, when its semantic checks passed, the stat of the
model they were checked against. An entry is used only while every one of those stats is unchanged
and the code that validates (the spec package and the target catalog, by their own stats) is the same.
A client of reconciler.state.statcache: a spec whose files changed within the racy window of the run's
start is not remembered. The file is rewritten only when an entry changed, so a no-op run writes
nothing; a read-only or refused `.npuctl` just goes without the cache, and a corrupt file is ignored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from reconciler import codestat
from reconciler.codestat import SPEC_CACHE_VERSION
from reconciler.state import statcache
from reconciler.state.statcache import stat_of

CACHE_VERSION = SPEC_CACHE_VERSION


def code_key() -> str:
    """The engine code this cache's entries were validated by (reconciler.codestat)."""
    return codestat.code_key(CACHE_VERSION)


class SpecCache:
    """The entries of one repository's cache file, read once per run, written back once if changed."""

    def __init__(self, root: Path | None) -> None:
        """`root`: the repository whose cache file this is; None: no cache (every lookup misses)."""
        self.started = time.time_ns()
        """Before any spec of this run was read: the moment the racy rule measures from."""
        self.entries: dict[str, dict[str, Any]] = {}
        self._held: dict[Path, dict[str, Any] | None] = {}
        self._stats: dict[str, statcache.Recorded | None] = {}
        self.changed = False
        folder = None if root is None else statcache.folder(root / ".npuctl")
        self.file = None if folder is None else folder / "specs.json"
        if self.file is None:
            return
        raw = statcache.read_json(self.file)
        if isinstance(raw, dict) and raw.get("code") == code_key():
            entries = raw.get("entries")
            self.entries = entries if isinstance(entries, dict) else {}

    def stat(self, path: str) -> statcache.Recorded | None:
        """`stat_of(path)`, once a run: many specs name one model."""
        if path not in self._stats:
            self._stats[path] = stat_of(path)
        return self._stats[path]

    def get(self, path: Path) -> dict[str, Any] | None:
        """The entry of the spec file at `path` while every file it was read from is unchanged (looked
        at once a run: discovery and loading both ask)."""
        if path not in self._held:
            self._held[path] = self._get(path)
        return self._held[path]

    def _get(self, path: Path) -> dict[str, Any] | None:
        entry = self.entries.get(str(path))
        if not isinstance(entry, dict):
            return None
        stats = entry.get("stats")
        if not isinstance(stats, list) or not stats:
            return None
        for source, recorded in stats:
            if stat_of(source) != recorded:
                return None
        return entry

    def put(self, path: Path, sources: tuple[Path, ...], data: dict[str, Any]) -> None:
        """Remember `data` for the spec at `path` unless one of its files changed during this run."""
        stats = [(str(s), stat_of(s)) for s in sources]
        if not all(statcache.trusted(st, self.started) for _, st in stats):
            self.forget(path)
            return
        self.entries[str(path)] = {**data, "stats": [list(pair) for pair in stats]}
        self._held.pop(path, None)
        self.changed = True

    def forget(self, path: Path) -> None:
        self._held.pop(path, None)
        if self.entries.pop(str(path), None) is not None:
            self.changed = True

    def save(self) -> None:
        """Written only into an existing `.npuctl`: a read command in a fresh checkout leaves no trace
        (a CI cache restored into `.npuctl` afterwards must find no folder there)."""
        if not self.changed or self.file is None or not self.file.parent.parent.is_dir():
            return
        text = json.dumps({"code": code_key(), "entries": self.entries}, separators=(",", ":"))
        statcache.write(self.file, text, ".specs-")
        self.changed = False
