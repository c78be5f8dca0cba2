"""For the Ray tests: the smallest real specs (the digits model on the host CPU, each batch size its own
build) in a real git repository, and a real multi-node Ray cluster: `ray.cluster_utils.Cluster` started
in a child interpreter (a head with no CPUs and the worker nodes asked for, each its own raylet, all on
127.0.0.1), with a token made for the test, so that nothing is written to ~/.ray. `env` is what a
driver needs to join it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.sdk.process import python_argv
from tests.conftest import copy_digits, git

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/digits.onnx, version: v1}}
  target: cpu
  inputs: {{image: [{batch}, 1, 8, 8]}}
  slo:
    size_mb: 1
"""

SCRIPT = """\
import json, os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback node addresses (ray_session)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_TMPDIR"] = sys.argv[1]  # Ray's files, its address file included, stay in the test's
os.makedirs(os.path.join(sys.argv[1], "ray"))
from ray.cluster_utils import Cluster

common = {"include_dashboard": False, "temp_dir": os.path.join(sys.argv[1], "ray")}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **common})
nodes = [cluster.add_node(**args) for args in json.loads(sys.argv[2])]
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address, "head": cluster.head_node.node_id,
                  "nodes": [node.node_id for node in nodes]}), flush=True)
sys.stdin.readline()
cluster.shutdown()
print("stopped", flush=True)
"""


def specs_repo(path: Path, batches: dict[str, int]) -> Path:
    """A git repository at `path` with one cpu spec per name, at its batch size (equal batch sizes
    share their builds)."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text(".npuctl/\n")
    (path / "specs").mkdir()
    copy_digits(path, eval_samples=4, calib_samples=4)
    for name, batch in batches.items():
        (path / "specs" / f"{name}.yaml").write_text(SPEC.format(name=name, batch=batch))
    return path


@dataclass(frozen=True)
class RayCluster:
    address: str
    head: str
    nodes: list[str]
    """The worker nodes' ids, in the order asked for."""
    env: dict[str, str]


@contextmanager
def ray_cluster(workdir: Path, nodes: list[dict[str, Any]]) -> Iterator[RayCluster]:
    """`nodes`: each worker node's `Cluster.add_node` arguments (num_cpus, resources)."""
    script = workdir / "cluster.py"
    script.write_text(SCRIPT)
    temp = tempfile.mkdtemp(prefix="npuctl-rc-", dir="/tmp")  # Ray's unix socket paths must be short
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    child = subprocess.Popen(
        [*python_argv(str(script), interpreter=sys.executable), temp, json.dumps(nodes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=workdir,
        env={**os.environ, **env},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        started = json.loads(child.stdout.readline())
        yield RayCluster(started["address"], started["head"], started["nodes"], env)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "stopped\n"
    finally:
        child.kill() if child.poll() is None else None
        child.wait(timeout=60)
        subprocess.run(["rm", "-rf", temp], check=False)


@dataclass(frozen=True)
class Killed:
    """What `apply --json` said after one of its busy workers was SIGKILLed."""

    returncode: int
    log: str
    """stderr"""
    data: dict[str, Any]
    """stdout, parsed: it must be exactly one JSON document"""


def apply_killing_one(
    repo: Path, executor_args: list[str], busy: Callable[[Any], Any], wait_s: float, poll_s: float
) -> Killed:
    """Runs `npuctl apply --json` with `executor_args`, SIGKILLs the first process `busy(psutil
    process of the apply)` finds (a worker running a spec) and waits for the apply to finish."""
    import signal
    import time

    import psutil

    out, err = repo.parent / "stdout", repo.parent / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        apply = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "apply", *executor_args, "--json"],
            cwd=repo,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "CI": "1"},
        )
        try:
            victim = None
            deadline = time.monotonic() + wait_s
            while victim is None and apply.poll() is None and time.monotonic() < deadline:
                victim = busy(psutil.Process(apply.pid))
                time.sleep(poll_s)
            assert victim is not None, err.read_text()
            victim.send_signal(signal.SIGKILL)
            apply.wait(timeout=300)
        finally:
            apply.kill() if apply.poll() is None else None
    return Killed(apply.returncode, err.read_text(), json.loads(out.read_text()))
