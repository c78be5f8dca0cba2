"""`npuctl push` / `pull` on a file:// remote, counted rather than timed: a push with nothing new asks
the remote once whatever the number of stages; a pull in a fresh clone sends two calls per record and
per object it moves, and neither imports what the URL does not need (a model library, the spec
models, another file system's client)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import git, run_npuctl
from tests.remote.conftest import clone, commit, digits_specs, lock_digests

HEAVY = ("onnx", "onnxruntime", "numpy", "pydantic", "s3fs", "botocore", "gcsfs", "asyncssh", "sshfs")
"""Modules a file:// push or pull has no use for."""

CLI = """\
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(set(sys.argv[1].split(",")) & set(sys.modules))), file=sys.stderr))
sys.argv = ["npuctl", *sys.argv[2:]]
from reconciler.cli import main
main()
"""


def _sync(repo: Path, *args: str) -> tuple[dict, list[str]]:
    """npuctl VERB --json in a fresh interpreter: its report, and which HEAVY modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", CLI, ",".join(HEAVY), *args, "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), json.loads(done.stderr.strip().splitlines()[-1])


def _recorded_keys(repo: Path) -> set[str]:
    keys = set()
    for lock in (repo / "specs").glob("*.lock.json"):
        for variant in json.loads(lock.read_text())["variants"].values():
            keys |= {s["key"] for s in variant["stages"].values() if not s.get("identity")}
    return keys


def test_a_push_with_nothing_new_is_one_call_and_a_pull_moves_bytes_without_reading_models(
    git_repo: Path, tmp_path: Path
) -> None:
    digits_specs(git_repo, 2)
    assert run_npuctl(git_repo, "apply").returncode == 0
    commit(git_repo)
    url = f"file://{tmp_path / 'shared'}"
    keys = _recorded_keys(git_repo)

    first, _ = _sync(git_repo, "push", "--remote", url)
    assert set(first["done"]) == keys
    again, heavy = _sync(git_repo, "push", "--remote", url)
    assert again["done"] == [] and set(again["present"]) == keys
    assert again["stats"]["remote_calls"] == 1  # one listing of the records, not a lookup per stage
    assert heavy == []

    fresh = clone(git_repo, tmp_path / "fresh")
    pulled, heavy = _sync(fresh, "pull", "--remote", url)
    assert set(pulled["done"]) == keys
    objects = lock_digests(git_repo)
    assert pulled["stats"]["objects_fetched"] == len(objects)
    # per record: its size, then its bytes; per object the same: nothing else is asked
    assert pulled["stats"]["remote_calls"] == 2 * len(keys) + 2 * len(objects)
    assert heavy == []
    assert git(fresh, "status", "--porcelain") == ""
