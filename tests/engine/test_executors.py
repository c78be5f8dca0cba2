"""Executors: specs through a real two-node Ray cluster (two raylets on 127.0.0.1, one CPU each, started
by the test) run on both nodes at once and give the same lock files as the local process pool with
as many jobs, and the Ray actors push every build to the remote cache. The local pool survives a lost
worker: a spec worker SIGKILLed while it runs a spec costs that spec one attempt, it is sent again to a
worker started in its place and built, and the other spec carries on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import run_npuctl
from tests.engine.ray_fixtures import apply_killing_one, ray_cluster, specs_repo

SPECS = {f"s{n}": 1 + n % 2 for n in range(6)}
"""Two distinct builds (batch 1 and 2), shared by half the specs each."""

RUN_TIME = ("latency_ms.", "peak_memory_mb")
"""Measurements a stopwatch or the process's RSS decides: they differ between any two runs."""


def _untimed(lock: dict[str, Any]) -> dict[str, Any]:
    """The lock without what differs between any two measuring runs: the timed and RSS measurements,
    evaluate's profile (its timing trace), and the signatures over them (evaluate's covers its
    measurements). Keys, artifacts, accuracy, size and verdicts stay."""
    for variant in lock["variants"].values():
        variant["stages"]["evaluate"]["signed"] = "<signs the measured>"
        for name, measurement in variant["measurements"].items():
            if name.startswith(RUN_TIME) and str(measurement.get("evidence", "")).startswith("measured"):
                for field in ("value", "detail", "digest"):
                    measurement[field] = "<measured>"
        profile = variant["stages"]["evaluate"]["artifacts"].get("profile")
        if profile is not None:
            profile.update(digest="<measured>", size="<measured>")
    return lock


def _locks(repo: Path) -> dict[str, dict[str, Any]]:
    return {p.name: _untimed(json.loads(p.read_text())) for p in sorted((repo / "specs").glob("*.lock.json"))}


@pytest.mark.slow
def test_specs_through_two_ray_nodes_give_the_lock_files_of_the_local_pool(tmp_path: Path) -> None:
    local = specs_repo(tmp_path / "local", SPECS)
    done = run_npuctl(local, "apply", "-j", "2", "--json")
    assert done.returncode == 0, done.stderr
    by_pool = json.loads(done.stdout)["specs"]
    assert len(by_pool) == 6 and all(s["status"] == "Healthy" for s in by_pool)

    ray = specs_repo(tmp_path / "ray", SPECS)
    remote = tmp_path / "remote"
    (ray / ".npuctl.yaml").write_text(f"remote:\n  url: file://{remote}\n")
    with ray_cluster(tmp_path, [{"num_cpus": 1}, {"num_cpus": 1}]) as cluster:
        through = run_npuctl(
            ray,
            "apply",
            "--executor",
            "ray",
            "--address",
            cluster.address,
            "-j",
            "2",
            "--json",
            env=cluster.env,
        )
    assert through.returncode == 0, through.stderr
    by_ray = json.loads(through.stdout)["specs"]
    assert [s["name"] for s in by_ray] == [s["name"] for s in by_pool]
    assert {s["ran_on"] for s in by_ray} == {f"ray node {node}" for node in cluster.nodes}  # both nodes
    built = [s for spec in by_ray for s in spec["stages"] if s["action"] == "built" and not s["identity"]]
    assert len({s["key"] for s in built}) == len(built)  # no key built twice, across both Ray workers
    assert _locks(ray) == _locks(local)
    assert len(_locks(ray)) == 6

    keys = {
        stage["key"]
        for lock in _locks(ray).values()
        for stage in lock["variants"]["default"]["stages"].values()
        if not stage["identity"]
    }
    assert keys <= {p.stem for p in (remote / "records").glob("*.json")}  # pushed by the Ray actors
    assert not any(line.startswith("npuctl: warning") for line in through.stderr.splitlines())


def _busy_spec_worker(root: psutil.Process) -> psutil.Process | None:
    """A spec worker with a live child: its stage child, started at its spec's first stage."""
    for process in root.children(recursive=True):
        try:
            if "reconciler.engine.spec_worker" in process.cmdline() and process.children():
                return process
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.slow
def test_a_killed_local_worker_costs_only_one_attempt_of_its_spec(tmp_path: Path) -> None:
    names = ["b1", "b2"]
    repo = specs_repo(tmp_path / "repo", {name: batch for batch, name in enumerate(names, 1)})
    killed = apply_killing_one(repo, ["-j", "2"], _busy_spec_worker, wait_s=120, poll_s=0.05)
    log, data = killed.log, killed.data
    assert killed.returncode == 0, log
    specs = {s["name"]: s for s in data["specs"]}
    assert sorted(specs) == names and all(s["status"] == "Healthy" for s in specs.values()), specs
    assert all((repo / "specs" / f"{name}.lock.json").is_file() for name in names)
    again = [line for line in log.splitlines() if "sent again to another worker (attempt 2 of 3)" in line]
    assert len(again) == 1 and "its worker died" in again[0], log
    assert sum(f"specs/{name}.yaml" in again[0] for name in names) == 1, again
