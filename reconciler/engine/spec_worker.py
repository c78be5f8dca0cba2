"""One spec's apply in its own isolated interpreter: the unit every executor runs.

`python -I -m reconciler.engine.spec_worker --serve` reads jobs (one JSON line each) on stdin and
answers each with its pickled `Outcome` (length-prefixed) on stdout; anything else the run prints
goes to stderr. One interpreter and one stage child serve every job it is given. It opens the repository's own
workspace (same store, state.db, key locks and ledger as a serial apply: the engine's locks already
make concurrent reconcilers safe) and attaches the run's remote cache, so a build here fetches its
inputs from it and pushes its outputs to it.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reconciler.engine.results import SpecResult


@dataclass(frozen=True)
class Job:
    root: str
    spec_file: str
    all_specs: tuple[str, ...]
    """Every spec of the run: their committed lock files feed the lock index, as in a serial apply."""
    remote: dict[str, Any] | None = None
    """RemoteConfig fields, or None."""
    remeasure: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        data["all_specs"] = tuple(data["all_specs"])
        return cls(**data)


@dataclass
class Outcome:
    result: SpecResult
    warnings: list[str] = field(default_factory=list)
    host: str = ""
    """Which machine ran it (the Ray node, or this one)."""


def run(job: Job, child: Any = None) -> Outcome:
    import socket

    from reconciler.engine import health
    from reconciler.engine.apply import apply_spec
    from reconciler.engine.execute import RetryPolicy
    from reconciler.engine.reporter import Reporter
    from reconciler.engine.resolve import index_locks
    from reconciler.engine.workspace import Workspace
    from reconciler.remote import Remote, RemoteConfig
    from reconciler.spec import check

    root = Path(job.root)
    warnings: list[str] = []
    host = socket.gethostname()
    reports = check([Path(job.spec_file)], root)
    report = reports[0]
    if not report.valid or report.spec is None:
        failed = SpecResult(report.name or Path(job.spec_file).stem, job.spec_file, "", status=health.STALLED)
        failed.errors.extend(str(e) for e in report.errors)
        return Outcome(failed, warnings, host)
    ws = Workspace.open(root)
    own_child = ws.child
    if child is not None:
        ws.child = child  # kept warm across jobs; closed by serve()
    try:
        if job.remote is not None:
            ws.remote = Remote(RemoteConfig(**job.remote), warnings.append)
        others = [r.spec for r in check([Path(p) for p in job.all_specs], root, semantic=False) if r.spec]
        index_locks(ws, [s.path for s in others])
        result = apply_spec(ws, report.spec, Reporter(), RetryPolicy.from_env(), job.remeasure)
    finally:
        ws.child = own_child
        ws.close()
    return Outcome(result, warnings, host)


WARM = (
    "reconciler.engine.apply",
    "reconciler.engine.execute",
    "reconciler.engine.resolve",
    "reconciler.engine.workspace",
    "reconciler.remote",
    "reconciler.spec",
)
"""What every job imports: loaded before the first job arrives. A worker is started ahead of its first
job (`WorkerProcess.start`), so this overlaps the parent's planning instead of delaying the job."""


def main() -> None:
    # by module name, not __main__: the pickled Outcome must load in the parent
    from backends.sdk.child_call import Child
    from reconciler.engine import spec_worker
    from reconciler.engine.worker_process import HEADER

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a run prints cannot corrupt the answers
    for module in WARM:
        importlib.import_module(module)
    child = Child()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            outcome = spec_worker.run(spec_worker.Job.from_json(line), child)
            payload = pickle.dumps(outcome)
            out.write(HEADER.pack(len(payload)) + payload)
            out.flush()
    finally:
        child.close()
        out.close()


if __name__ == "__main__":
    main()
