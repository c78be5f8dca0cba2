"""Settled specs: a no-op plan or apply reuses the last result that found a spec with nothing to do.

A spec is settled when every stage is cached and its verdicts are recorded, with no error, no lock
problem and nothing carried over. Its plan and apply results are kept in `.npuctl/cache/settled.json`
with a witness (reconciler.state.statcache) of everything they were derived from: the spec file and
its bases, its lock file, every file, folder (each sub-folder and file in it) and store object its
keys and records read, and every lock file of the run when a stage was looked up in another spec's
lock. The whole file holds only while the world it was written in is the same: the code (the
reconciler and backends packages and plug-ins, by their stats), the interpreter, the state database's
identity (a record replaced or removed moves it; a record added does not: it changes no answer drawn
from the others), the trust policy and this machine's key (reconciler.trust), and the implementation identity of every
stage used (toolchain versions). Anything
changed -> that spec's full path, which re-derives its keys and re-runs its lock's integrity checks;
the other specs keep their entries.

Plan (and status) write it, only when an entry was added, and so does apply after it built or
rewrote a lock file: it plans the specs it changed, so the next plan finds them settled. A file
written during the run that remembers it (the lock file apply has just written, the objects it
stored) is racy: its witness carries the digest of the content the entry was derived from, and the
next run reads that file again instead of planning the spec. A remote cache, a remote runner, fsck's
repair or `--remeasure` never use it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reconciler.engine import world
from reconciler.engine.results import SpecResult
from reconciler.engine.workspace import Workspace
from reconciler.engine.world import impl_table, impls_hold
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import statcache
from reconciler.state.statcache import stat_of

VERSION = 3
Stat = statcache.Recorded | None
"""None: the path could not be stat'd."""


def _pack(result: dict[str, Any], values: list[Any], index: dict[str, int]) -> dict[str, Any]:
    """The result with each measurement replaced by its place in `values` (specs share them)."""
    packed: dict[str, dict[str, int]] = {}
    for variant, measured in result["measurements"].items():
        packed[variant] = {}
        for name, value in measured.items():
            text = json.dumps(value, sort_keys=True)
            if text not in index:
                index[text] = len(values)
                values.append(value)
            packed[variant][name] = index[text]
    return {**result, "measurements": packed}


def _unpack(packed: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    measured = {v: {n: values[i] for n, i in m.items()} for v, m in packed["measurements"].items()}
    return {**packed, "measurements": measured}


ABSENT = "-absent"
"""In a stored apply result: the plan result's keys it does not have (no result field starts with -)."""


def _delta(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """`other` as written beside `base`: the fields it has that differ, its stage rows that `base` has
    too as their index there, and the fields it lacks. A settled spec's apply result is its plan
    result less the verify row, so this stores a few integers instead of a second result."""
    out: dict[str, Any] = {}
    for key, value in other.items():
        if key in base and base[key] == value:
            continue
        rows = base.get(key)
        if key == "stages" and isinstance(value, list) and isinstance(rows, list):
            out[key] = [rows.index(row) if row in rows else row for row in value]
        else:
            out[key] = value
    missing = [key for key in base if key not in other]
    if missing:
        out[ABSENT] = missing
    return out


def _undelta(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    absent = set(delta.get(ABSENT, ()))
    out = {key: value for key, value in base.items() if key not in absent}
    for key, value in delta.items():
        if key == ABSENT:
            continue
        if key == "stages" and isinstance(value, list):
            out[key] = [base[key][row] if isinstance(row, int) else row for row in value]
        else:
            out[key] = value
    return out


def is_settled(result: SpecResult) -> bool:
    return (
        not result.errors
        and not result.lock_problems
        and not result.carried_over
        and bool(result.stages)
        and all(s.action == "cached" for s in result.stages)
    )


def engine_code() -> list[Any]:
    return world.engine_code(VERSION)


class Settled:
    """One run's view of the cache file: read once, written back once if an entry was added."""

    def __init__(
        self,
        ws: Workspace,
        specs: list[LoadedSpec],
        every: list[Path] | None = None,
        stats: dict[str, Stat] | None = None,
    ) -> None:
        """`specs`: those this run read; `every`: the spec files of the whole run when it read only
        some of them (a partial replay, reconciler.cli._replay), whose lock files a shared lookup
        depends on; `stats`: paths this run has stat'd already."""
        self.started = min([time.time_ns(), *(s.read_ns for s in specs if s.read_ns is not None)])
        """The racy rule's moment: before the specs were read, so a spec edited after it was read (its
        result computed from the old text) is never recorded under its new stat."""
        self._ws = ws
        self._stats: dict[str, Stat] = dict(stats or {})
        self.entries: dict[str, Any] = {}
        self.changed = False
        self.added = 0
        """Entries this run remembered."""
        self._touched: set[str] = set()
        self._shared = False
        self._paths: list[statcache.Witness] = []
        self._values: list[Any] = []
        self._ok: dict[int, bool] = {}
        self._refreshed = 0
        """Bytes of the racy witnesses this run refreshed (`_holds`)."""
        self._bytes = 0
        self.file: Path | None = None
        self._read = False
        self._locks = [str(Layout.lock_file(f)) for f in (every or [s.path for s in specs])]
        self.usable = ws.remote is None and not ws.repair  # fsck rebuilds what a plan would not
        folder = statcache.folder(ws.layout.state_dir) if self.usable else None
        if folder is None:
            self.usable = False
            return
        self.file = folder / "settled.json"
        self.world = [engine_code(), ws.db.identity(), ws.trust.fingerprint()]

    def _load(self) -> None:
        """Reads the file at the first question that needs it: a plan of a few changed specs beside a
        replay (reconciler.cli._replay) asks none when none of them ends settled."""
        if self._read or self.file is None:
            return
        self._read = True
        raw = statcache.read_json(self.file)
        self._bytes = self.file.stat().st_size if raw is not None else 0
        if isinstance(raw, dict) and raw.get("world") == self.world and impls_hold(raw.get("impls")):
            try:
                self._paths = [[str(w[0]), *w[1:]] for w in raw["paths"]]
                self._values = list(raw["values"])
                self.entries = {**dict(raw["entries"]), **self.entries}  # remembered ones win
            except (KeyError, TypeError, ValueError, IndexError):
                self._paths, self._values = [], []
                self.entries = {k: v for k, v in self.entries.items() if v.get("new")}

    def _holds(self, index: int) -> bool:
        """Whether the loaded path at `index` still has its recorded stat (stat'd once a run) and, for
        a racy one, its recorded content. A racy witness that holds on a stat now older than the racy
        window becomes a plain one (`statcache.refreshed`), kept by the next save, which it causes
        when later runs would otherwise read much again (`statcache.worth_rewriting`: the thousand
        lock files an apply wrote at 1000 specs)."""
        if index not in self._ok:
            seen = self._paths[index]
            stat = self._stat(seen[0])
            self._ok[index] = statcache.holds(seen, stat)
            if self._ok[index] and stat is not None and statcache.refreshed(seen, stat, self.started):
                self._paths[index] = [seen[0], stat]  # its content read again now: the stat vouches
                self._refreshed += stat[2]  # its size: what each later run would read again
        return self._ok[index]

    def _loaded(self, entry: Any) -> dict[str, Any] | None:
        """A loaded entry with paths and measurements restored, while every input is unchanged."""
        try:
            if not entry["inputs"] or not all(self._holds(i) for i in entry["inputs"]):
                return None
            inputs = [list(self._paths[i]) for i in entry["inputs"]]
            applied = _undelta(entry["plan"], entry["apply"])
            kinds = {"plan": _unpack(entry["plan"], self._values), "apply": _unpack(applied, self._values)}
        except (KeyError, TypeError, IndexError, AttributeError):
            return None
        return {"inputs": inputs, **kinds, "new": True}

    def inputs_of(self, spec_file: str) -> list[statcache.Witness] | None:
        """The witnesses the entry of the spec in `spec_file` holds on (None without an entry): what a
        replay must find unchanged (reconciler.cli._replay)."""
        if not self.usable:
            return None
        if spec_file not in self.entries:
            self._load()
        entry = self.entries.get(spec_file)
        if not isinstance(entry, dict):
            return None
        try:
            if entry.get("new"):
                return [list(w) for w in entry["inputs"]]
            if not all(self._holds(i) for i in entry["inputs"]):
                return None  # a stale entry this run planned in full and did not replace
            return [list(self._paths[i]) for i in entry["inputs"]]
        except (KeyError, TypeError, IndexError, ValueError):
            return None

    def remembered_inputs(self, spec_file: str) -> list[statcache.Witness] | None:
        """The witnesses of the entry this run remembered for the spec in `spec_file` (None when it
        remembered none: a spec this run planned in full and did not find settled)."""
        entry = self.entries.get(spec_file) if self.usable else None
        if not (isinstance(entry, dict) and entry.get("new")):
            return None
        return [list(w) for w in entry["inputs"]]

    def _stat(self, path: str) -> Stat:
        if path not in self._stats:
            self._stats[path] = stat_of(path)
        return self._stats[path]

    def get(self, spec: LoadedSpec, kind: str) -> SpecResult | None:
        """The `kind` ("plan" or "apply") result recorded for the spec, while nothing it read changed."""
        return self.get_at(str(spec.path), kind)

    def get_at(self, spec_file: str, kind: str) -> SpecResult | None:
        """`get` for the spec in `spec_file`, which this run need not have read."""
        if not self.usable:
            return None
        self._load()
        entry = self.entries.get(spec_file)
        if isinstance(entry, dict) and not entry.get("new"):
            entry = self._loaded(entry)
            if entry is not None:
                self.entries[spec_file] = entry  # restored once: plan and apply both ask
        if entry is None:
            return None
        try:
            return SpecResult.from_json(entry[kind])
        except (KeyError, TypeError):
            return None

    @contextmanager
    def tracking(self, ws: Workspace) -> Iterator[None]:
        """Records what the hasher is asked for inside the block, for the next `remember`."""
        ws.hasher.touched = set()
        lookups = ws.locks.lookups
        try:
            yield
        finally:
            self._touched |= ws.hasher.touched or set()
            self._shared |= ws.locks.lookups != lookups
            ws.hasher.touched = None

    def remember(self, spec: LoadedSpec, plan: SpecResult, apply: SpecResult | None) -> None:
        """Keeps both results of a settled spec, with the stats of what `tracking` saw read."""
        touched, self._touched = self._touched, set()
        shared, self._shared = self._shared, False
        if not self.usable or apply is None or not (is_settled(plan) and is_settled(apply)):
            return
        if (spec.field("evaluate") or {}).get("runner", "local") != "local":
            return  # a remote runner's identity is part of evaluate's key and is not checked here
        paths = [str(spec.path), *map(str, spec.sources), str(Layout.lock_file(spec.path))]
        for path in sorted(touched):
            paths += _expand(path)
        if shared:  # a stage found in another spec's lock: which lock answers depends on them all
            paths += self._locks
        texts = {str(spec.path), *map(str, spec.sources)}  # read before their stat: never vouched for
        known = lambda path: None if path in texts else self._known(path)  # noqa: E731
        inputs = [statcache.witness(p, self._stat(p), self.started, known) for p in dict.fromkeys(paths)]
        if any(w is None or (w[1] is None and w[0] in texts) for w in inputs):
            return
        kinds = {"plan": plan.to_json(), "apply": apply.to_json()}
        if any(SpecResult.from_json(data).to_json() != data for data in kinds.values()):
            return  # a field the cache would not restore exactly: never reused
        self.entries[str(spec.path)] = {"inputs": inputs, **kinds, "new": True}
        self.changed = True
        self.added += 1

    def _known(self, path: str) -> str | None:
        """The digest of the content this run read from `path`, when it hashed or parsed it."""
        return self._ws.hasher.known(path) or self._ws.lock_digest(path)

    def save(self) -> None:
        """Best effort, into an existing `.npuctl` only: a failed write costs the next run the full path.
        Entries whose inputs changed since they were written are dropped."""
        self.changed |= statcache.worth_rewriting(self._refreshed, self._bytes)
        if not self.changed or self.file is None or not self.file.parent.parent.is_dir():
            return
        self._load()
        paths: dict[str, int] = {}
        seen: dict[str, statcache.Witness] = {}
        values: list[Any] = []
        index: dict[str, int] = {}
        entries: dict[str, Any] = {}
        for name, entry in self.entries.items():
            full = entry if isinstance(entry, dict) and entry.get("new") else self._loaded(entry)
            if full is None:
                continue
            inputs = []
            for witness in full["inputs"]:
                inputs.append(paths.setdefault(witness[0], len(paths)))
                seen.setdefault(witness[0], witness)
            plan = _pack(full["plan"], values, index)
            entries[name] = {
                "inputs": inputs,
                "plan": plan,
                "apply": _delta(plan, _pack(full["apply"], values, index)),
            }
        table = [seen[p] for p in paths]
        data = {"world": self.world, "impls": impl_table(), "paths": table, "values": values}
        text = json.dumps({**data, "entries": entries}, separators=(",", ":"))
        statcache.write(self.file, text, ".settled-")
        self.changed = False


def _expand(path: str) -> list[str]:
    """A file, or a folder with every sub-folder and file under it (an added file changes its folder)."""
    if not os.path.isdir(path):
        return [path]
    out = [path]
    pending = [path]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                out.append(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return out
