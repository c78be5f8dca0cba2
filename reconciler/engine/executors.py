"""Executors: where the specs of one apply run. The engine alone knows them; backends never do.

The unit of work is one spec's chain, run by `spec_worker` in an isolated interpreter: serial
(in-process, the default `-j 1`), a local pool of `-j` workers, or long-lived Ray actors on a cluster,
one spec at a time each (`ray_executor`). Every unit uses the same keys, key locks, state database, ledger and lock files, and
the run's remote cache, so a build anywhere is a hit everywhere.
"""

from __future__ import annotations

import os
import pickle
import queue
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from backends.sdk.process import NEUTRAL_CWD, python_argv
from reconciler.engine.schedule import Placement, dispatch
from reconciler.engine.spec_worker import Job, Outcome
from reconciler.engine.worker_process import WorkerFailed, WorkerProcess
from reconciler.remote.config import RemoteConfig

MEMORY_PER_JOB = 1536 << 20
"""Memory one spec's build may take (toolchains such as RKNN's need about 1 GiB): bounds `-j`."""
ATTEMPTS = 3
"""How many times one spec is sent to a worker when workers die under it (Ray's own `max_retries`
default for tasks). A retry is safe: a stage's key lock is released when its holder dies, and a stage
is written whole or not at all."""


class Executor(Protocol):
    name: str

    def run(self, jobs: list[Job], places: list[Placement]) -> Iterator[Outcome]:
        """Every job's outcome, in the order of `jobs`; started in `schedule.dispatch`'s order."""
        ...

    def close(self) -> None: ...


def bounded_jobs(requested: int) -> int:
    """`-j N` bounded by the cores and the memory available now (never below 1)."""
    import psutil

    cores = os.cpu_count() or 1
    memory = max(1, int(psutil.virtual_memory().available // MEMORY_PER_JOB))
    return max(1, min(requested, cores, memory))


def jobs_for(root: Path, spec_files: list[Path], remote: RemoteConfig | None, remeasure: bool) -> list[Job]:
    config = None if remote is None else {k: v for k, v in asdict(remote).items()}
    every = tuple(str(p) for p in spec_files)
    return [Job(str(root), str(p), every, config, remeasure) for p in spec_files]


def sent_again(job: Job, why: str, attempt: int) -> str:
    """The warning for a spec whose worker died under it and that goes to a worker again."""
    return f"{job.spec_file}: {why}; sent again to another worker (attempt {attempt + 1} of {ATTEMPTS})"


class LocalPool:
    """`-j N` long-lived worker interpreters on this machine, fed one spec at a time. A worker that
    dies under a spec (killed, out of memory) is started again and the spec sent to it again, at most
    `ATTEMPTS` times in all, with a warning naming it; the other workers carry on."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.jobs = bounded_jobs(jobs)
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._workers = [WorkerProcess(python_argv(), NEUTRAL_CWD) for _ in range(self.jobs)]
        for worker in self._workers:
            worker.start()  # warm while the run plans
            self._idle.put(worker)

    def _one(self, job: Job) -> Outcome:
        retried: list[str] = []
        for attempt in range(1, ATTEMPTS + 1):
            worker = self._idle.get()
            try:
                outcome: Outcome = pickle.loads(worker.run(job.to_json()))  # our own worker's answer
            except WorkerFailed as exc:  # the worker died: started again by its next run
                if attempt == ATTEMPTS:
                    outcome = failed_outcome(job, RuntimeError(f"{exc} ({ATTEMPTS} attempts)"))
                else:
                    retried.append(sent_again(job, f"its worker died: {exc}", attempt))
                    continue
            except (OSError, pickle.UnpicklingError, EOFError) as exc:
                outcome = failed_outcome(job, exc)
            finally:
                self._idle.put(worker)
            outcome.warnings.extend(retried)
            return outcome
        raise AssertionError("unreachable: the last attempt returns")

    def run(self, jobs: list[Job], places: list[Placement]) -> Iterator[Outcome]:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:

            def wait(handles: list[Future[Outcome]]) -> tuple[Future[Outcome], Outcome]:
                done, _ = futures.wait(handles, return_when=futures.FIRST_COMPLETED)
                handle = next(iter(done))
                return handle, handle.result()

            def submit(_: int, job: Job) -> Future[Outcome]:
                return pool.submit(self._one, job)

            yield from in_order(dispatch(jobs, places, self.jobs, submit, wait), len(jobs))

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


def in_order(finished: Iterator[tuple[int, Outcome]], count: int) -> Iterator[Outcome]:
    """Outcomes as they finish, re-ordered into the jobs' order (the run's output keeps spec order)."""
    waiting: dict[int, Outcome] = {}
    emitted = 0
    for index, outcome in finished:
        waiting[index] = outcome
        while emitted in waiting:
            yield waiting.pop(emitted)
            emitted += 1
    assert emitted == count


def failed_outcome(job: Job, exc: BaseException) -> Outcome:
    from reconciler.engine import health
    from reconciler.engine.results import SpecResult

    result = SpecResult(Path(job.spec_file).stem, job.spec_file, "", status=health.FAILED)
    result.errors.append(f"{job.spec_file}: {exc}")
    return Outcome(result)
