"""Executors: 20 specs through a real local Ray cluster (started and stopped by npuctl inside the test,
on 127.0.0.1) give the same lock files as the local process pool, and the Ray tasks push every
build to the remote cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_digits, git, run_npuctl

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


def _repo(path: Path, specs: int) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text(".npuctl/\n")
    (path / "specs").mkdir()
    copy_digits(path, eval_samples=4, calib_samples=4)
    for n in range(specs):  # two distinct builds (batch 1 and 2), shared by ten specs each
        (path / "specs" / f"s{n:02d}.yaml").write_text(SPEC.format(name=f"s{n:02d}", batch=1 + n % 2))
    return path


RUN_TIME = ("latency_ms.", "peak_memory_mb")
"""Measurements a stopwatch or the process's RSS decides: they differ between any two runs."""


def _untimed(lock: dict[str, Any]) -> dict[str, Any]:
    """The lock without what differs between any two measuring runs: the timed and RSS measurements,
    and evaluate's profile (its timing trace). Keys, artifacts, accuracy, size and verdicts stay."""
    for variant in lock["variants"].values():
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
def test_twenty_specs_through_ray_give_the_lock_files_of_the_local_pool(tmp_path: Path) -> None:
    local = _repo(tmp_path / "local", 20)
    done = run_npuctl(local, "apply", "-j", "2", "--json")
    assert done.returncode == 0, done.stderr
    by_pool = json.loads(done.stdout)["specs"]
    assert len(by_pool) == 20 and all(s["status"] == "Healthy" for s in by_pool)

    ray = _repo(tmp_path / "ray", 20)
    remote = tmp_path / "remote"
    (ray / ".npuctl.yaml").write_text(f"remote:\n  url: file://{remote}\n")
    through = run_npuctl(ray, "apply", "--executor", "ray", "-j", "2", "--json")
    assert through.returncode == 0, through.stderr
    by_ray = json.loads(through.stdout)["specs"]
    assert [s["name"] for s in by_ray] == [s["name"] for s in by_pool]
    built = [s for spec in by_ray for s in spec["stages"] if s["action"] == "built" and not s["identity"]]
    assert len({s["key"] for s in built}) == len(built)  # no key built twice, across both Ray workers
    assert _locks(ray) == _locks(local)
    assert len(_locks(ray)) == 20

    keys = {
        stage["key"]
        for lock in _locks(ray).values()
        for stage in lock["variants"]["default"]["stages"].values()
        if not stage["identity"]
    }
    assert keys <= {p.stem for p in (remote / "records").glob("*.json")}  # pushed by the Ray tasks
    assert (ray / ".npuctl" / "ray").is_dir()  # Ray's temp folder is inside the run's state
    assert not any(line.startswith("npuctl: warning") for line in through.stderr.splitlines())
