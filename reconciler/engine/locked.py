"""apply --locked: the committed lock files must already be what apply would write.

The rule of `npm ci` and Terraform's `-lockfile=readonly`: in CI the committed lock is the truth, so a
spec edited without re-applying (its lock no longer of the spec) fails the job instead of being
rebuilt and silently re-locked on a runner whose lock file nobody commits. The check builds nothing,
fetches nothing and writes no lock file: it is plan against the committed locks alone (the remote
cache is set aside, since a key found only there is still missing from the lock), then, for a spec
whose stages and verdicts all stand, apply's own dry walk, which compares the whole lock apply would
write (sources, model, verdicts) with the committed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reconciler.engine.apply import dry_apply
from reconciler.engine.plan import plan_spec
from reconciler.engine.resolve import index_locks
from reconciler.engine.workspace import Workspace
from reconciler.repo import Layout
from reconciler.spec import LoadedSpec
from reconciler.state import lockfile


@dataclass(frozen=True)
class StaleLock:
    """A committed lock file that apply would change, and why."""

    spec: str
    lock: Path
    reasons: tuple[str, ...]
    unreadable: bool = False
    """The lock file cannot be read at all (the one reason says where): an error, not a stale lock."""


def stale_locks(ws: Workspace, specs: list[LoadedSpec]) -> list[StaleLock]:
    """Every spec whose committed lock file apply would change, in the order given."""
    remote, ws.remote = ws.remote, None
    try:
        index_locks(ws, [s.path for s in specs])
        out = []
        for spec in specs:
            lock = Layout.lock_file(spec.path)
            try:
                reasons = _reasons(ws, spec)
            except lockfile.LockUnreadable as exc:
                out.append(StaleLock(spec.name, lock, (str(exc),), unreadable=True))
                continue
            if reasons:
                out.append(StaleLock(spec.name, lock, tuple(reasons)))
        ws.hasher.flush()
        return out
    finally:
        ws.remote = remote


def _reasons(ws: Workspace, spec: LoadedSpec) -> list[str]:
    """Why the spec's lock would change; [] when apply would leave it byte-identical."""
    if lockfile.read(Layout.lock_file(spec.path)) is None:
        return ["no lock file is committed for this spec"]
    planned = plan_spec(ws, spec)
    reasons = [*planned.lock_problems, *planned.errors]
    shown: set[str] = set()
    for stage in planned.stages:
        if stage.action == "cached" or stage.variant in shown:
            continue
        shown.add(stage.variant)  # the first stage that changes; those below it follow from it
        reasons.append(f"{stage.variant}/{stage.name} would {stage.action}: {stage.reason}")
    if reasons:
        return reasons
    ws.hasher.flush()  # file digests computed here are a cache, not a lock change
    if dry_apply(ws, spec) is None:
        return ["the lock apply would write differs from the committed one (its sources, model or verdicts)"]
    return []
