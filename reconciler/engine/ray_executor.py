"""`--executor ray`: each spec's chain as a Ray task, on a private local cluster or an existing one.

npuctl sets Ray's settings, never the user's global configuration: usage statistics off, a private
cluster for `address="local"` listening on loopback only, with no dashboard and its temp folder in the
run's `.npuctl/ray` (reached through a short symlink in /tmp when that path is too long for Ray's unix
sockets), and `num_cpus` from `-j`.

Loopback only: Ray's gcs_server binds 127.0.0.1 exactly when its node address is "127.0.0.1"
(`listen_to_localhost_only = node_ip_address == "127.0.0.1"`, gcs_server.cc), and so do the raylet
and the core workers (measured); any other address binds gRPC's wildcard, `::`. But
`ray.init(_node_ip_address="127.0.0.1")` goes through `services.resolve_ip_for_localhost`, which
swaps a loopback address for the machine's routable one unless `ray_constants.ENABLE_RAY_CLUSTER` is
false, a constant read once, when Ray is imported, from `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`. So for a
private cluster npuctl sets that variable to 0 before importing Ray (the processes Ray starts inherit
it) and checks afterwards that every node's address is loopback; if Ray was imported earlier with
the variable unset, the run warns instead of claiming loopback. The same swap would make an existing
cluster at a loopback address (`--address 127.0.0.1:6379`) unreachable, so it is set for that too.

Actors each keep one isolated spec worker interpreter (`worker_process`) on their node and are
given one spec at a time, at most `-j` at once (the cluster's CPUs for an existing cluster), in
`schedule.dispatch`'s order. Their code is shipped by value, so no Ray worker imports anything from
a module path for it. A spec whose backend's toolchain is installed on some nodes only goes where the
cluster declares `npuctl-backend-<name>`. The repository must be at the same path on every node that
runs tasks (a private cluster, or a shared checkout); artifacts move through the remote cache.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from reconciler.engine.schedule import Placement, dispatch
from reconciler.engine.spec_worker import Job, Outcome

RESOURCE_PREFIX = "npuctl-backend-"
SOCKET_PATH_ROOM = 107 - len("/session_2026-12-02_01-45-33_123456_123456/sockets/plasma_store")
"""Ray's unix sockets live under its temp dir, and AF_UNIX paths are limited to 107 bytes."""
LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""0 keeps Ray from replacing a loopback node address with a routable one (see the module docstring)."""


def _on_loopback(address: str) -> bool:
    """A cluster address on this machine's loopback ("127.0.0.1:6379"): Ray would swap its host for
    the routable address too, and never reach a cluster that listens on loopback only."""
    host = address.rpartition(":")[0].strip("[]")
    return host in {"localhost", LOOPBACK, "::1"}


class Unplaceable(Exception):
    """No node of the cluster can build the spec; `str(err)` is one line for the user."""


class _Worker:
    """A Ray actor holding one long-lived, isolated spec worker on its node."""

    def __init__(self, python: list[str], cwd: str) -> None:
        from reconciler.engine.worker_process import WorkerProcess  # shipped by value

        self.process = WorkerProcess(python, cwd)

    def run(self, job_json: str) -> tuple[str, bytes]:
        import ray

        return ray.get_runtime_context().get_node_id(), self.process.run(job_json)

    def close(self) -> None:
        self.process.close()


class RayExecutor:
    name = "ray"

    def __init__(
        self, address: str, jobs: int, state_dir: Path, warn: Callable[[str], None] | None = None
    ) -> None:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        if address == "local" or _on_loopback(address):
            os.environ[LOOPBACK_ENV] = "0"  # read when Ray is imported, and by every process it starts
        import ray

        from backends.sdk.process import NEUTRAL_CWD, python_argv
        from reconciler.engine import worker_process

        self.ray: Any = ray
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        self._alias: Path | None = None
        if address == "local":
            temp = state_dir.resolve() / "ray"
            temp.mkdir(parents=True, exist_ok=True)
            if len(str(temp)) > SOCKET_PATH_ROOM:
                # a short name for the same folder: Ray's files still live in the run's state
                self._alias = Path(tempfile.mkdtemp(prefix="npuctl-ray-", dir="/tmp"))
                (self._alias / "r").symlink_to(temp, target_is_directory=True)
                temp = self._alias / "r"
            options.update(num_cpus=jobs, _temp_dir=str(temp), _node_ip_address=LOOPBACK)
        ray.init(address=address, **options)
        if address == "local" and not self._loopback_only(ray) and warn is not None:
            warn(
                f"the private Ray cluster listens beyond loopback: Ray was imported before npuctl "
                f"set {LOOPBACK_ENV}=0"
            )
        for module in (sys.modules[__name__], worker_process):
            ray.cloudpickle.register_pickle_by_value(module)
        self._actor: Any = ray.remote(num_cpus=0, max_restarts=0)(_Worker)
        self._argv = (python_argv(), NEUTRAL_CWD)
        resources = ray.cluster_resources()
        self.slots = jobs if address == "local" else max(1, min(jobs, int(resources.get("CPU", jobs))))
        self._declared = {k for k in resources if k.startswith(RESOURCE_PREFIX)}
        self._nodes = sum(1 for node in ray.nodes() if node["Alive"])
        self._free: dict[str | None, list[Any]] = {}
        self._actors: list[Any] = []

    @staticmethod
    def _loopback_only(ray: Any) -> bool:
        return all(node["NodeManagerAddress"] == LOOPBACK for node in ray.nodes())

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
        free = self._free.setdefault(resource, [])
        if free:
            return free.pop()
        options: dict[str, Any] = {"scheduling_strategy": "SPREAD"}
        if resource is not None:
            options["resources"] = {resource: 0.001}
        actor = self._actor.options(**options).remote(*self._argv)
        self._actors.append(actor)
        return actor

    def run(self, jobs: list[Job], places: list[Placement]) -> Iterator[Outcome]:
        import pickle

        from reconciler.engine.executors import failed_outcome, in_order

        ray = self.ray
        owner: dict[Any, tuple[Job, str | None, Any]] = {}

        def submit(index: int, job: Job) -> Any:
            try:
                resource = self.resource_for(places[index])
            except Unplaceable as exc:  # that spec's error, at once; the others go on
                ref = ray.put(pickle.dumps(failed_outcome(job, exc)))
                owner[ref] = (job, None, None)
                return ref
            actor = self._take(resource)
            ref = actor.run.remote(job.to_json())
            owner[ref] = (job, resource, actor)
            return ref

        def wait(refs: list[Any]) -> tuple[Any, Outcome]:
            ready, _ = ray.wait(refs, num_returns=1)
            job, resource, actor = owner.pop(ready[0])
            if actor is not None:
                self._free.setdefault(resource, []).append(actor)
            try:
                answer = ray.get(ready[0])
                if actor is None:
                    return ready[0], pickle.loads(answer)  # not placed: its error
                node, data = answer
                outcome: Outcome = pickle.loads(data)  # our own worker's answer
                outcome.result.ran_on = f"ray node {node}"
            except Exception as exc:  # noqa: BLE001 - a failed task is that spec's error
                outcome = failed_outcome(job, exc)
            return ready[0], outcome

        yield from in_order(dispatch(jobs, places, self.slots, submit, wait), len(jobs))

    def close(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):  # shutting down anyway
                self.ray.get(actor.close.remote(), timeout=30)
        self.ray.shutdown()
        if self._alias is not None:
            shutil.rmtree(self._alias, ignore_errors=True)  # the link only; the folder stays
