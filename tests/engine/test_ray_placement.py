"""Placement on a real multi-node Ray cluster (tests.engine.ray_fixtures: a head with no CPUs and two
worker nodes, each its own raylet, all on 127.0.0.1).
Only one worker node declares `npuctl-backend-onnxruntime`: every cpu spec runs there (the JSON output
names the node). No node declares the RKNN backend, whose toolchain is a managed environment: its spec
fails at once with one line, instead of waiting for ever on a resource no node has, and blocks no
other spec."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import copy_digits, git, run_npuctl
from tests.engine.ray_fixtures import RayCluster, ray_cluster

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
def cluster(tmp_path: Path) -> Iterator[RayCluster]:
    nodes = [{"num_cpus": 1}, {"num_cpus": 1, "resources": {"npuctl-backend-onnxruntime": 1}}]
    with ray_cluster(tmp_path, nodes) as started:
        yield started


@pytest.mark.slow
def test_specs_run_only_on_nodes_that_declare_their_toolchain(tmp_path: Path, cluster: RayCluster) -> None:
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
        repo,
        "apply",
        "--executor",
        "ray",
        "--address",
        cluster.address,
        "-j",
        "2",
        "--json",
        env=cluster.env,
        timeout=240,
    )
    specs = {s["name"]: s for s in json.loads(done.stdout)["specs"]}
    assert done.returncode == 1, done.stderr  # one spec failed, the others built

    for name in ("a", "b", "c"):
        assert specs[name]["status"] == "Healthy", specs[name]
        assert specs[name]["ran_on"] == f"ray node {cluster.nodes[1]}", (name, cluster)

    rk = specs["rk"]
    assert rk["status"] == "Failed" and "ran_on" not in rk, rk
    assert len(rk["errors"]) == 1 and "\n" not in rk["errors"][0]
    assert "no node of the Ray cluster declares npuctl-backend-rknn" in rk["errors"][0]
    assert not (repo / "specs" / "rk.lock.json").exists()
