"""The Ray executor survives a lost worker: `npuctl apply --executor ray --json` on a private cluster
(started by npuctl on 127.0.0.1), and the test SIGKILLs the Ray actor process that is running a spec.
That spec loses one attempt and is sent again to another worker, which builds it; the other specs
carry on. Ray announces the death on the driver's stdout ("(raylet) A worker died..."), and the
output is still exactly one JSON document."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.engine.ray_fixtures import apply_killing_one, specs_repo

RUNNING = "ray::_Worker.run"
"""The title Ray gives an actor's process while it runs that method: a spec in flight."""


def _running_actor(root: psutil.Process) -> psutil.Process | None:
    for process in root.children(recursive=True):
        try:
            if process.cmdline()[:1] == [RUNNING]:
                return process
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.slow
def test_a_killed_ray_worker_costs_only_one_attempt_of_its_spec(tmp_path: Path) -> None:
    names = ["b1", "b2"]
    repo = specs_repo(tmp_path / "repo", {name: batch for batch, name in enumerate(names, 1)})  # 2 builds

    killed = apply_killing_one(repo, ["--executor", "ray", "-j", "2"], _running_actor, wait_s=300, poll_s=0.1)
    log, data = killed.log, killed.data  # only npuctl's JSON on stdout
    assert killed.returncode == 0, log
    specs = {s["name"]: s for s in data["specs"]}
    assert sorted(specs) == names and all(s["status"] == "Healthy" for s in specs.values()), specs
    assert all((repo / "specs" / f"{name}.lock.json").is_file() for name in names)
    again = [line for line in log.splitlines() if "sent again to another worker (attempt 2 of 3)" in line]
    assert len(again) == 1 and "its Ray worker died" in again[0], log  # one spec lost one attempt
    assert sum(f"specs/{name}.yaml" in again[0] for name in names) == 1, again
