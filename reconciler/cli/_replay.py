"""A no-op plan or apply of a settled repository prints what the last identical run printed; a plan
after an edit reads only the specs that changed.

Per spec, a settled run still costs loading, validating and looking up every spec; at 1000 specs that
is most of a no-op. A plan (and an apply that changed something) also writes, per spec in output
order, the witnesses (reconciler.state.statcache) its settled result (reconciler.engine.settled)
stands on (spec, bases, lock, model, data, store objects; none for a spec not settled) and that
result's part of the plan's output (reconciler.cli._render.Piece), beside what the whole output
stands on: the scanned spec folders' listings and every other YAML file in them (an added or
re-kinded spec), the remote's config file, the trust policy and this machine's key file, the state
database's identity and the engine's code, interpreter and toolchain identities (as the settled cache
checks them). When every spec is settled it keeps what the apply of the same invocation prints too.

The next plan or apply of the same invocation (the same paths, format, working directory and the
environment variables npuctl reads) stats those files. None changed and every spec settled: it
prints the stored output (a plan joins the stored pieces), what a stat-based build tool's no-op
costs (one stat per input), the same bytes the full path prints (a test holds them equal). Some
specs changed (or not settled) and the rest held, for a plan of spec folders: those specs are read
and planned, the others' pieces printed as stored, unread (neither the spec nor the settled cache),
so the plan costs the no-op plus the changed specs' own work. Anything else (the folders, the world,
a changed spec that no longer loads or claims another's name, a witness changed within the racy
window of the run that recorded it without a digest of its content) -> the full path. A no-op apply
only reads the file.
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

from reconciler.cli._ci import Tally
from reconciler.cli._render import Piece
from reconciler.repo import Layout, find_root

if TYPE_CHECKING:
    from reconciler.engine.settled import Settled
    from reconciler.engine.workspace import Workspace

VERSION = 6
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


@dataclass(frozen=True)
class Partial:
    """A plan whose recorded output holds for all but some specs (maybe none): those are read and
    planned, the others' pieces printed as stored."""

    changed: list[str]
    """Spec files to read: changed since the record, or not settled when it was made."""
    order: list[str]
    """Every spec file of the recorded run, in its output order."""
    pieces: list[Piece | None]
    """Per spec of `order`, its stored piece where its witnesses held (None: it is in `changed`)."""
    edited: bool
    """Every changed spec's own file changed since it was recorded settled: none of them can be in
    the validated-spec cache (reconciler.spec._cache), which need not be read."""
    stats: dict[str, Any]
    """What each recorded path's stat was found to be (the settled cache need not stat it again)."""
    file: Path
    raw: dict[str, Any]
    """The record as read: `record_partly` keeps what held."""


def replay(
    command: str, paths: tuple[Path, ...], fmt: str, started: float, mode: str = ""
) -> int | Partial | None:
    """For an apply, the exit code after printing the recorded output of this invocation; for a plan,
    what to read again and what to print as stored (Partial, all stored when nothing changed); None:
    run it in full."""
    from reconciler.state import statcache

    root = find_root(Path.cwd())
    key = _key(root, paths, fmt)
    file = _file(root, key)
    if file is None:
        return None
    read_ns = time.time_ns()
    try:
        raw = statcache.read_json(file)
        if raw is None or raw["key"] != key:
            return None
        stats: dict[str, Any] = {}
        held = _held(raw, read_ns, stats)
        if held is None or not all(held[i] for i in raw["outside"]):
            return None
        fresh = [inputs is not None and all(held[i] for i in inputs) for _, inputs, _ in raw["specs"]]
        rewrite = all(fresh) and statcache.worth_rewriting(raw.pop("refreshed"), file.stat().st_size)
        if rewrite:
            statcache.write(file, json.dumps(raw, separators=(",", ":")), ".replay-")
        if command == "apply":
            printed = raw["printed"].get("apply") if all(fresh) else None
            if printed is None or mode not in printed["codes"]:
                return None
            return show(Printed(**printed), time.monotonic() - started, mode)
        if not all(fresh) and (not any(fresh) or not all(map(os.path.isdir, key["targets"]))):
            return None  # a named spec file's siblings' names count, and they are not witnessed
        order = [str(spec_file) for spec_file, _, _ in raw["specs"]]
        changed = [f for f, ok in zip(order, fresh, strict=True) if not ok]
        pieces = [_piece(s[2]) if ok else None for s, ok in zip(raw["specs"], fresh, strict=True)]
        edited = all(
            inputs and raw["paths"][inputs[0]][0] == spec_file and not held[inputs[0]]
            for (spec_file, inputs, _), ok in zip(raw["specs"], fresh, strict=True)
            if not ok
        )
        return Partial(changed, order, pieces, edited, stats, file, raw)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _piece(stored: list[Any]) -> Piece:
    name, text, status, actions, verdicts = stored
    return Piece(name, text, Tally(status, tuple(actions), tuple(verdicts)))


def _stored(piece: Piece | None) -> list[Any] | None:
    if piece is None:
        return None
    tally = piece.tally
    return [piece.name, piece.text, tally.status, list(tally.actions), list(tally.verdicts)]


def _held(raw: dict[str, Any], read_ns: int, stats: dict[str, Any]) -> list[bool] | None:
    """Per recorded path, whether its witness holds; None when the state database, the engine's code
    or a stage implementation moved. Racy witnesses that hold on a stat now trusted become plain ones
    (`raw["refreshed"]`: their bytes, which later runs need not read again once the caller writes the
    file back, when that is worth it)."""
    from reconciler.engine import world
    from reconciler.state.db import stored_identity
    from reconciler.state.statcache import holds, refreshed, stat_of

    if stored_identity(Path(raw["database"])) != raw["identity"]:
        return None
    paths, read_again, held = [], 0, []
    for seen in raw["paths"]:
        stat = stats[seen[0]] = stat_of(seen[0])
        held.append(holds(seen, stat))
        if held[-1] and stat is not None and refreshed(seen, stat, read_ns):
            seen, read_again = [seen[0], stat], read_again + stat[2]
        paths.append(seen)
    if not (raw["world"] == world.engine_code(VERSION) and world.impls_hold(raw["impls"])):
        return None
    raw["refreshed"], raw["paths"] = read_again, paths
    return held


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
    pieces: dict[str, Piece],
    paths: tuple[Path, ...],
    fmt: str,
    printed: dict[str, Printed],
) -> bool:
    """Keeps, for the next identical invocation, what each spec's settled result stands on with its
    piece of the plan's output (`pieces`, by spec file, in output order) and `printed` (what the
    apply prints, kept only when every spec is settled); best effort."""
    from reconciler.engine import world
    from reconciler.remote.config import CONFIG_FILE
    from reconciler.state import statcache

    if ws.remote is not None or not settled.usable or not pieces:
        return False
    root = ws.layout.root
    key = _key(root, paths, fmt)
    file = _file(root, key)
    if file is None:
        return False
    from reconciler.trust import keys, policy

    trust_files = [str(root / policy.FILE), str(keys.key_path())]  # whose records count
    own = set(pieces)  # each witnessed with its spec's inputs, or read again every run
    outside = [str(root / CONFIG_FILE), *trust_files, *_scanned(_targets(root, paths))]
    seen = [
        statcache.witness(p, statcache.stat_of(p), settled.started, _listing) for p in outside if p not in own
    ]
    if any(w is None for w in seen):
        return False  # changed during (or just before) this run: a same-tick rewrite keeps its stat
    table: dict[str, int] = {}
    stats: list[statcache.Witness] = []
    outside_at = [_place(stats, table, w) for w in seen if w is not None]
    specs = [_entry(f, _placed(stats, table, settled.inputs_of(f)), piece) for f, piece in pieces.items()]
    if all(s[1] is None for s in specs):
        return False  # nothing a later run could reuse
    data = {
        "key": key,
        "database": str(ws.layout.database),
        "identity": settled.world[1],  # read before the run read any record
        "paths": stats,
        "outside": outside_at,
        "specs": specs,
        "world": world.engine_code(VERSION),
        "impls": world.impl_table(),
        "printed": _kept(printed, specs),
    }
    return statcache.write(file, json.dumps(data, separators=(",", ":")), ".replay-")


def _entry(spec_file: str, inputs: list[int] | None, piece: Piece) -> list[Any]:
    """A spec's entry: its file, its witnesses and its piece (both None when it is not settled)."""
    return [spec_file, inputs, None if inputs is None else _stored(piece)]


def record_partly(settled: Settled, partial: Partial, pieces: dict[str, Piece]) -> bool:
    """Keeps the record `partial` was read from with the witnesses and pieces of the changed specs
    found settled now (`pieces`, by spec file); written only when one was. A changed spec not settled
    keeps its old entry: witnesses that failed once fail again (a stat does not come back), so it is
    read again either way. The apply's output is kept only while no entry changed."""
    from reconciler.state import statcache

    raw = partial.raw
    raw.pop("refreshed", None)
    table = {w[0]: i for i, w in enumerate(raw["paths"])}
    settled_now = 0
    for index, entry in enumerate(raw["specs"]):
        inputs = (
            _placed(raw["paths"], table, settled.remembered_inputs(entry[0])) if entry[0] in pieces else None
        )
        if inputs is not None:
            raw["specs"][index] = _entry(entry[0], inputs, pieces[entry[0]])
            settled_now += 1
    if not settled_now:
        return False
    raw["printed"] = {}
    return statcache.write(partial.file, json.dumps(_pruned(raw), separators=(",", ":")), ".replay-")


def _kept(printed: dict[str, Printed], specs: list[list[Any]]) -> dict[str, Any]:
    """The output kept: only when every spec's result has its witnesses (else no run replays it)."""
    return {name: asdict(p) for name, p in printed.items()} if all(s[1] is not None for s in specs) else {}


def _placed(paths: list[Any], table: dict[str, int], held: list[Any] | None) -> list[int] | None:
    """A spec's witnesses as indices into the record's table; None when it has none to stand on (not
    settled, or one changed within the racy window without a digest): read again every run."""
    if held is None or any(w is None for w in held):
        return None
    return [_place(paths, table, w) for w in held]


def _place(paths: list[Any], table: dict[str, int], seen: Any) -> int:
    """The index of `seen`'s path in the record's table, its witness now `seen`."""
    if seen[0] in table:
        paths[table[seen[0]]] = seen
    else:
        table[seen[0]] = len(paths)
        paths.append(seen)
    return table[seen[0]]


def _pruned(raw: dict[str, Any]) -> dict[str, Any]:
    """The record with only the paths something in it refers to."""
    used = sorted({*raw["outside"], *(i for _, inputs, _ in raw["specs"] for i in inputs or ())})
    at = {old: new for new, old in enumerate(used)}
    specs = [
        [f, None if inputs is None else [at[i] for i in inputs], piece] for f, inputs, piece in raw["specs"]
    ]
    return {
        **raw,
        "paths": [raw["paths"][i] for i in used],
        "outside": [at[i] for i in raw["outside"]],
        "specs": specs,
    }
