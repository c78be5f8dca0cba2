"""`--executor ray`: each spec's chain as a Ray task, on a private local cluster or an existing one.

npuctl sets Ray's settings, never the user's global configuration: usage statistics off, a private
cluster for `address="local"` on node address 127.0.0.1 with no dashboard and its temp folder in the
run's `.npuctl/ray` (reached through a short symlink in /tmp when that path is too long for Ray's unix
sockets), and `num_cpus` from `-j`. A task runs the spec in an isolated
interpreter (`spec_worker`) on its node; the task function is shipped by value, so no Ray worker
imports anything from a module path for it. The repository must be at the same path on every node
that runs tasks (a private cluster, or a shared checkout); artifacts move through the remote cache.
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

from reconciler.engine.spec_worker import Job, Outcome

SOCKET_PATH_ROOM = 107 - len("/session_2026-12-02_01-45-33_123456_123456/sockets/plasma_store")
"""Ray's unix sockets live under its temp dir, and AF_UNIX paths are limited to 107 bytes."""


class _Worker:
    """A Ray actor holding one long-lived, isolated spec worker on its node."""

    def __init__(self, python: list[str], cwd: str) -> None:
        from reconciler.engine.worker_process import WorkerProcess  # shipped by value

        self.process = WorkerProcess(python, cwd)

    def run(self, job_json: str) -> bytes:
        return self.process.run(job_json)

    def close(self) -> None:
        self.process.close()


class RayExecutor:
    name = "ray"

    def __init__(
        self, address: str, jobs: int, state_dir: Path, warn: Callable[[str], None] | None = None
    ) -> None:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        os.environ.setdefault("RAY_DISABLE_IMPORT_WARNING", "1")
        import ray

        self.ray: Any = ray
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
            "ignore_reinit_error": False,
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
            options.update(num_cpus=jobs, _temp_dir=str(temp), _node_ip_address="127.0.0.1")
        self.temp_dir = options.get("_temp_dir")
        ray.init(address=address, **options)
        from backends.child import NEUTRAL_CWD, python_argv
        from reconciler.engine import worker_process

        for module in (sys.modules[__name__], worker_process):
            ray.cloudpickle.register_pickle_by_value(module)
        actor: Any = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
        slots = int(ray.cluster_resources().get("CPU", 1)) if address != "local" else jobs
        self._actors: list[Any] = [
            actor.remote(python_argv(), NEUTRAL_CWD) for _ in range(max(1, min(jobs, slots)))
        ]

    def run(self, jobs: list[Job]) -> Iterator[Outcome]:
        """Jobs go to whichever actor is free; outcomes come back in the order of `jobs`."""
        import pickle

        from reconciler.engine.executors import failed_outcome

        ray = self.ray
        free = list(self._actors)
        pending: dict[Any, tuple[int, Any]] = {}
        answers: dict[int, Outcome] = {}
        queue = list(enumerate(jobs))
        emitted = 0
        while emitted < len(jobs):
            while free and queue:
                index, job = queue.pop(0)
                actor = free.pop()
                pending[actor.run.remote(job.to_json())] = (index, actor)
            ready, _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ready[0])
            free.append(actor)
            try:
                answers[index] = pickle.loads(ray.get(ready[0]))  # our own worker's answer
            except Exception as exc:  # noqa: BLE001 - a failed task is that spec's error
                answers[index] = failed_outcome(jobs[index], exc)
            while emitted in answers:
                yield answers.pop(emitted)
                emitted += 1

    def close(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):  # shutting down anyway
                self.ray.get(actor.close.remote(), timeout=30)
        self.ray.shutdown()
        if self._alias is not None:
            shutil.rmtree(self._alias, ignore_errors=True)  # the link only; the folder stays
