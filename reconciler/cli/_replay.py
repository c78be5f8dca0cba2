"""A no-op plan or apply of a settled repository prints what the last identical run printed.

Per spec, a settled run still costs loading, validating and looking up every spec; at 1000 specs that
is most of a no-op. When every spec of a plan is settled (reconciler.engine.settled), the plan also
writes what it and the apply of the same invocation print, with a witness (reconciler.state.statcache)
of every file the output stands on: each spec's settled inputs (spec, bases, lock, model, data, store
objects), the scanned spec folders and every YAML file in them (an added or re-kinded spec), the
remote's config file, the trust policy and this machine's key file; and the state database's identity and the engine's code, interpreter and
toolchain identities (as the settled cache checks them). The next plan or apply of the same invocation (the same paths, format, working
directory and the environment variables npuctl reads) stats those files and, when none changed,
prints the stored output: what a stat-based build tool's no-op costs (one stat per input), and the
same bytes the full path prints (a test holds them equal). Anything changed, changed within the
racy window of the run that recorded it without a digest of its content, or not settled -> the full
path. Plan writes the file; a no-op apply only reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.repo import Layout, find_root

if TYPE_CHECKING:
    from reconciler.engine.settled import Settled
    from reconciler.engine.workspace import Workspace

VERSION = 4
KEPT_ENV = ("CI", "GITHUB_ACTIONS", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "PATH", "PYTHONPATH")
"""Besides every NPUCTL_* variable: what the commands read (remote, toolchains, annotations)."""


@dataclass
class Printed:
    """What a command prints, in order: stdout chunks, stderr lines, then the summary line (with the
    run's time and exit code); the exit code per mode ("" or "strict")."""

    out: list[str]
    err: list[str]
    summary: str
    codes: dict[str, int]
    summary_err: bool


def show(printed: Printed, seconds: float, mode: str = "") -> int:
    for chunk in printed.out:
        click.echo(chunk)
    for line in printed.err:
        click.echo(line, err=True)
    code = printed.codes[mode]
    click.echo(f"{printed.summary}; {seconds:.1f} s; exit {code}", err=printed.summary_err)
    return code


def _targets(root: Path, paths: tuple[Path, ...]) -> list[str]:
    return [os.path.abspath(p) for p in paths] or [str(Layout(root).default_specs())]


def _key(root: Path, paths: tuple[Path, ...], fmt: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k.startswith("NPUCTL_") or k in KEPT_ENV}
    python = [sys.executable, sys.version]
    return {
        "v": VERSION,
        "cwd": os.getcwd(),
        "targets": _targets(root, paths),
        "fmt": fmt,
        "env": env,
        "python": python,
    }


def _file(root: Path, key: dict[str, Any]) -> Path | None:
    """The replay file of the invocation `key`; None when the stat caches are off or refused."""
    from reconciler.state import statcache

    folder = statcache.folder(Layout(root).state_dir)
    if folder is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return folder / "replay" / f"{digest}.json"


def replay(command: str, paths: tuple[Path, ...], fmt: str, started: float, mode: str = "") -> int | None:
    """The exit code after printing the recorded output of this invocation; None: run it in full."""
    from reconciler.state import statcache

    root = find_root(Path.cwd())
    key = _key(root, paths, fmt)
    file = _file(root, key)
    if file is None:
        return None
    read_ns = time.time_ns()
    try:
        raw = statcache.read_json(file)
        if raw is None or raw["key"] != key or not _holds(raw, read_ns):
            return None
        printed = Printed(**raw["printed"][command])
        if mode not in printed.codes:
            return None
        rewrite = statcache.worth_rewriting(raw.pop("refreshed"), file.stat().st_size)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if rewrite:
        statcache.write(file, json.dumps(raw, separators=(",", ":")), ".replay-")
    return show(printed, time.monotonic() - started, mode)


def _holds(raw: dict[str, Any], read_ns: int) -> bool:
    """Whether every witness holds; racy ones that hold on a stat now trusted become plain ones
    (`raw["refreshed"]`: their bytes, which later runs need not read again once the caller writes
    the file back, when that is worth it)."""
    from reconciler.engine import world
    from reconciler.state.db import stored_identity
    from reconciler.state.statcache import holds, refreshed, stat_of

    if stored_identity(Path(raw["database"])) != raw["identity"]:
        return False
    paths, read_again = [], 0
    for seen in raw["paths"]:
        stat = stat_of(seen[0])
        if not holds(seen, stat):
            return False
        if stat is not None and refreshed(seen, stat, read_ns):
            seen, read_again = [seen[0], stat], read_again + stat[2]
        paths.append(seen)
    if not (raw["world"] == world.engine_code(VERSION) and world.impls_hold(raw["impls"])):
        return False
    raw["refreshed"], raw["paths"] = read_again, paths
    return True


def _scanned(targets: list[str]) -> list[str]:
    """The target folders and every YAML file in them (which of them is a spec can change)."""
    out = []
    for target in targets:
        out.append(target)
        if os.path.isdir(target):
            with os.scandir(target) as entries:
                out += sorted(e.path for e in entries if e.name.endswith((".yaml", ".yml")))
    return out


def _listing(path: str) -> str | None:
    """A scanned spec folder changed during the run (apply renames lock files into it) is witnessed by
    its listing: which YAML files it holds is what the output stands on, and each of them has its own
    witness. A racy YAML file is not vouched for."""
    from reconciler.state import statcache

    return statcache.content_digest(path) if os.path.isdir(path) else None


def record(
    ws: Workspace,
    settled: Settled,
    specs: list[Any],
    paths: tuple[Path, ...],
    fmt: str,
    printed: dict[str, Printed],
) -> bool:
    """Keeps `printed` for the next identical invocation, when every spec is settled; best effort."""
    from reconciler.engine import world
    from reconciler.remote.config import CONFIG_FILE
    from reconciler.state import statcache

    if ws.remote is not None or not settled.usable or not specs:
        return False
    root = ws.layout.root
    key = _key(root, paths, fmt)
    file = _file(root, key)
    if file is None:
        return False
    from reconciler.trust import keys, policy

    trust_files = [str(root / policy.FILE), str(keys.key_path())]  # whose records count
    outside = [str(root / CONFIG_FILE), *trust_files, *_scanned(_targets(root, paths))]
    seen = [statcache.witness(p, statcache.stat_of(p), settled.started, _listing) for p in outside]
    for spec in specs:
        held = settled.inputs_of(spec)
        if held is None:
            return False
        seen += held
    if any(w is None for w in seen):
        return False  # changed during (or just before) this run: a same-tick rewrite keeps its stat
    stats = list({w[0]: w for w in seen if w is not None}.values())
    data = {
        "key": key,
        "database": str(ws.layout.database),
        "identity": settled.world[1],  # read before the run read any record
        "paths": stats,
        "world": world.engine_code(VERSION),
        "impls": world.impl_table(),
        "printed": {name: asdict(p) for name, p in printed.items()},
    }
    return statcache.write(file, json.dumps(data, separators=(",", ":")), ".replay-")
