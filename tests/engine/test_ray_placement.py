"""Placement on a real multi-node Ray cluster: `ray.cluster_utils.Cluster` started by the test in a
child interpreter (a head with no CPUs and two worker nodes, each its own raylet, all on 127.0.0.1).
Only one worker node declares `npuctl-backend-onnxruntime`: every cpu spec runs there (the JSON output
names the node). No node declares the RKNN backend, whose toolchain is a managed environment: its spec
fails at once with one line, instead of waiting for ever on a resource no node has, and blocks no
other spec."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.sdk.process import python_argv
from tests.conftest import copy_digits, git, run_npuctl

CLUSTER = """\
import json, os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback node addresses (ray_executor)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_TMPDIR"] = sys.argv[1]  # Ray's files, its address file included, stay in the test's
os.makedirs(os.path.join(sys.argv[1], "ray"))
from ray.cluster_utils import Cluster

common = {"include_dashboard": False, "temp_dir": os.path.join(sys.argv[1], "ray")}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **common})
plain = cluster.add_node(num_cpus=1)
declared = cluster.add_node(num_cpus=1, resources={"npuctl-backend-onnxruntime": 1})
cluster.wait_for_nodes()
nodes = {"head": cluster.head_node.node_id, "plain": plain.node_id, "declared": declared.node_id}
print(json.dumps({"address": cluster.address, **nodes}), flush=True)
sys.stdin.readline()
cluster.shutdown()
print("stopped", flush=True)
"""

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/digits.onnx, version: v1}}
  target: {target}
  inputs: {{image: [{batch}, 1, 8, 8]}}
{extra}  slo:
    size_mb: 1
"""
EXTRA = {"rk3588": "  evaluate: {data: ../data/eval}\n"}
"""What validate asks of a target beyond the common fields (the RKNN simulator evaluates on samples)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    script = tmp_path / "cluster.py"
    script.write_text(CLUSTER)
    temp = tempfile.mkdtemp(prefix="npuctl-rc-", dir="/tmp")  # Ray's unix socket paths must be short
    child = subprocess.Popen(
        [*python_argv(str(script), interpreter=sys.executable), temp],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline()
        yield json.loads(line)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "stopped\n"
    finally:
        child.kill() if child.poll() is None else None
        child.wait(timeout=60)
        subprocess.run(["rm", "-rf", temp], check=False)


@pytest.mark.slow
def test_specs_run_only_on_nodes_that_declare_their_toolchain(
    tmp_path: Path, cluster: dict[str, str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=4, calib_samples=4)
    for name, target, batch in (("a", "cpu", 1), ("b", "cpu", 2), ("c", "cpu", 1), ("rk", "rk3588", 1)):
        (repo / "specs" / f"{name}.yaml").write_text(
            SPEC.format(name=name, target=target, batch=batch, extra=EXTRA.get(target, ""))
        )

    done = run_npuctl(
        repo, "apply", "--executor", "ray", "--address", cluster["address"], "-j", "2", "--json", timeout=240
    )
    specs = {s["name"]: s for s in json.loads(done.stdout)["specs"]}
    assert done.returncode == 1, done.stderr  # one spec failed, the others built

    for name in ("a", "b", "c"):
        assert specs[name]["status"] == "Healthy", specs[name]
        assert specs[name]["ran_on"] == f"ray node {cluster['declared']}", (name, cluster)

    rk = specs["rk"]
    assert rk["status"] == "Failed" and "ran_on" not in rk, rk
    assert len(rk["errors"]) == 1 and "\n" not in rk["errors"][0]
    assert "no node of the Ray cluster declares npuctl-backend-rknn" in rk["errors"][0]
    assert not (repo / "specs" / "rk.lock.json").exists()
