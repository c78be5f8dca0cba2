"""`--executor ray`: each spec's chain sent to a long-lived Ray actor, on a private local cluster or
an existing one (reconciler.engine.ray_session joins it).

Ray actors, not one Ray task per spec: each actor keeps one isolated spec worker interpreter
(`worker_process`) on its node, so the interpreter, its imports and its stage child are paid for
once per actor, not once per spec (as in the local pool). Actors are given one spec at a time, at
most `-j` at once (the cluster's CPUs for an existing cluster), in `schedule.dispatch`'s order; each
holds one CPU, so Ray spreads them over the nodes by their cores. Only a job's JSON goes out and a pickled outcome comes back: models and
artifacts are read from the repository path and move through the remote cache, never through Ray's
object store. The actors' code is shipped by value, so no Ray worker imports anything from a module
path for it. A spec whose backend's toolchain is installed on some nodes only goes where the cluster
declares `npuctl-backend-<name>`. The repository must be at the same path on every node that runs
specs (a private cluster, or a shared checkout).

A worker that dies (its actor's process or its spec worker killed, its node lost) costs the spec it
was running one attempt: the spec is sent again to another actor, at most `ATTEMPTS` times in all,
with a warning naming it; the dead actor is dropped and the other specs carry on. A retry is safe:
a stage's key lock is released when its holder dies, and a stage is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.engine.executors import ATTEMPTS, sent_again
from reconciler.engine.schedule import Placement, dispatch
from reconciler.engine.spec_worker import Job, Outcome

RESOURCE_PREFIX = "npuctl-backend-"
THREAD_VARIABLES = ("OMP_NUM_THREADS",)
"""What Ray sets in an actor's environment from its `num_cpus` (1 here) and the local pool leaves as
the user set it: the spec worker gets the driver's value (or none), so a stage uses the same threads
whichever executor runs it."""


class Unplaceable(Exception):
    """No node of the cluster can build the spec; `str(err)` is one line for the user."""


class _Worker:
    """A Ray actor holding one long-lived, isolated spec worker on its node."""

    def __init__(self, python: list[str], cwd: str, threads: dict[str, str | None]) -> None:
        import os

        from reconciler.engine.worker_process import WorkerProcess  # shipped by value

        for name, value in threads.items():  # this process is the actor's own: its spec worker inherits
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.process = WorkerProcess(python, cwd)
        self.process.start()  # warm before the first spec arrives

    def run(self, job_json: str) -> tuple[str, bytes | None, str]:
        """(node id, the pickled outcome or None, why the spec worker died)."""
        import ray

        from reconciler.engine.worker_process import WorkerFailed

        node = ray.get_runtime_context().get_node_id()
        try:
            return node, self.process.run(job_json), ""
        except WorkerFailed as exc:
            return node, None, str(exc)

    def close(self) -> None:
        self.process.close()


@dataclass
class _Flight:
    """One spec's current attempt: the job, its resource, the actor running it."""

    job: Job
    resource: str | None
    actor: Any
    attempt: int = 1


class RayExecutor:
    name = "ray"

    def __init__(
        self, address: str, jobs: int, state_dir: Path, warn: Callable[[str], None] | None = None
    ) -> None:
        from backends.sdk.process import NEUTRAL_CWD, python_argv
        from reconciler.engine import worker_process
        from reconciler.engine.ray_session import Session

        self.session = Session(address, jobs, state_dir, warn)
        ray = self.ray = self.session.ray
        for module in (sys.modules[__name__], worker_process):
            ray.cloudpickle.register_pickle_by_value(module)
        self._actor: Any = ray.remote(max_restarts=0)(_Worker)
        threads = {name: os.environ.get(name) for name in THREAD_VARIABLES}
        self._argv = (python_argv(), NEUTRAL_CWD, threads)
        try:
            resources = ray.cluster_resources()
            nodes = ray.nodes()
        except BaseException:
            self.session.close()
            raise
        self.slots = jobs if address == "local" else max(1, min(jobs, int(resources.get("CPU", jobs))))
        self._declared = {k for k in resources if k.startswith(RESOURCE_PREFIX)}
        self._nodes = sum(1 for node in nodes if node["Alive"])
        self._free: dict[str | None, list[Any]] = {}
        self._actors: list[Any] = []
        if not self._declared:  # every spec may go anywhere: the actors start while the run plans
            self._free[None] = [self._take(None) for _ in range(self.slots)]

    def resource_for(self, place: Placement) -> str | None:
        """The custom resource a spec needs: `npuctl-backend-<name>` when the cluster declares it for
        the spec's backend (nodes started with `--resources '{"npuctl-backend-rknn": 1}'` where the
        RKNN environment is installed); None, placed anywhere, otherwise: on one node (whose backend
        says itself when its toolchain is missing) or for a toolchain that comes with npuctl.

        Unplaceable for a managed toolchain on a cluster of several nodes that none declares: Ray would
        wait for ever for a resource no node has, and placing it anywhere would build on nodes that
        may not have the environment."""
        wanted = f"{RESOURCE_PREFIX}{place.needs}" if place.needs else None
        if wanted in self._declared:
            return wanted
        if place.managed and self._nodes > 1:
            raise Unplaceable(
                f"no node of the Ray cluster declares {wanted}, and the {place.needs} toolchain is a "
                f"managed environment installed node by node: start the nodes that have it with "
                f"`ray start --resources '{{\"{wanted}\": 1}}'`"
            )
        return None

    def _take(self, resource: str | None) -> Any:
        """An idle actor for `resource`, or a new one. An actor placed anywhere holds one CPU, so that
        Ray spreads them over the nodes by their cores; one pinned to a declared resource holds none
        (its node's declared count, not its cores, may be what limits it)."""
        free = self._free.setdefault(resource, [])
        if free:
            return free.pop()
        options: dict[str, Any] = {"scheduling_strategy": "SPREAD", "num_cpus": 1}
        if resource is not None:
            options.update(num_cpus=0, resources={resource: 0.001})
        actor = self._actor.options(**options).remote(*self._argv)
        self._actors.append(actor)
        return actor

    def _drop(self, actor: Any) -> None:
        """A dead actor leaves the pool (Ray would fail every later call on it at once)."""
        if actor in self._actors:
            self._actors.remove(actor)
        with contextlib.suppress(Exception):  # dead already
            self.ray.kill(actor, no_restart=True)

    def _send(self, flight: _Flight) -> Any:
        flight.actor = self._take(flight.resource)
        return flight.actor.run.remote(flight.job.to_json())

    def _died(self, exc: BaseException) -> bool:
        errors = self.ray.exceptions
        return isinstance(exc, errors.RayActorError | errors.WorkerCrashedError | errors.NodeDiedError)

    def _answer(self, ref: Any, flight: _Flight) -> Outcome | str:
        """The spec's outcome, or why its worker died (the actor is then dropped)."""
        from reconciler.engine.executors import failed_outcome

        try:
            node, data, died = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a failed call is that spec's error
            if self._died(exc):
                self._drop(flight.actor)
                return f"its Ray worker died: {str(exc).strip().splitlines()[0][:200]}"
            self._free.setdefault(flight.resource, []).append(flight.actor)
            return failed_outcome(flight.job, exc)
        self._free.setdefault(flight.resource, []).append(flight.actor)
        if data is None:
            return died
        outcome: Outcome = pickle.loads(data)  # our own worker's answer
        outcome.result.ran_on = f"ray node {node}"
        return outcome

    def run(self, jobs: list[Job], places: list[Placement]) -> Iterator[Outcome]:
        from reconciler.engine.executors import failed_outcome, in_order

        ray = self.ray
        flights: dict[Any, _Flight] = {}
        live: dict[Any, Any] = {}
        """The handle dispatch holds -> the ref of the spec's current attempt."""
        retried: dict[Any, list[str]] = {}

        def submit(index: int, job: Job) -> Any:
            try:
                resource = self.resource_for(places[index])
            except Unplaceable as exc:  # that spec's error, at once; the others go on
                ref = ray.put(failed_outcome(job, exc))
                flights[ref] = _Flight(job, None, None)
                return ref
            flight = _Flight(job, resource, None)
            ref = self._send(flight)
            flights[ref] = flight
            return ref

        def wait(handles: list[Any]) -> tuple[Any, Outcome]:
            while True:
                origin = {live.get(h, h): h for h in handles}
                ready, _ = ray.wait(list(origin), num_returns=1)
                handle = origin[ready[0]]
                flight = flights.pop(ready[0])
                live.pop(handle, None)
                if flight.actor is None:
                    return handle, ray.get(ready[0])  # not placed: its error
                answer = self._answer(ready[0], flight)
                if isinstance(answer, Outcome):
                    answer.warnings.extend(retried.pop(handle, []))
                    return handle, answer
                if flight.attempt >= ATTEMPTS:
                    failed = failed_outcome(flight.job, RuntimeError(f"{answer} ({ATTEMPTS} attempts)"))
                    failed.warnings.extend(retried.pop(handle, []))
                    return handle, failed
                retried.setdefault(handle, []).append(sent_again(flight.job, answer, flight.attempt))
                flight.attempt += 1
                ref = self._send(flight)
                flights[ref] = flight
                live[handle] = ref

        yield from in_order(dispatch(jobs, places, self.slots, submit, wait), len(jobs))

    def close(self) -> None:
        try:
            with contextlib.suppress(Exception):  # shutting down anyway
                self.ray.get([actor.close.remote() for actor in self._actors], timeout=30)  # all at once
        finally:
            self.session.close()
