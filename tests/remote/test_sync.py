"""`npuctl push` / `pull` on a file:// remote, counted rather than timed: a push with nothing new since
this machine's last push asks the remote nothing, and once (one listing) whatever the number of
stages when told to `--verify`; a pull in a fresh clone sends two calls per record and per object it
moves, and neither imports what the URL does not need (a model library, the spec models, another file
system's client)."""

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


def test_a_push_with_nothing_new_asks_nothing_and_a_pull_moves_bytes_without_reading_models(
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
    assert again["done"] == [] and set(again["present"]) == keys and again["present_by_record"]
    assert again["stats"]["remote_calls"] == 0  # this machine just sent them all
    assert heavy == []
    listed, _ = _sync(git_repo, "push", "--remote", url, "--verify")
    assert listed["done"] == [] and set(listed["present"]) == keys and "present_by_record" not in listed
    assert listed["stats"]["remote_calls"] == 2  # one listing of the records, one of the objects
    uncached = run_npuctl(git_repo, "push", "--remote", url, "--json", env={"NPUCTL_NO_CACHE": "1"})
    assert json.loads(uncached.stdout)["stats"]["remote_calls"] == 1  # the caches off: the remote answers

    fresh = clone(git_repo, tmp_path / "fresh")
    pulled, heavy = _sync(fresh, "pull", "--remote", url)
    assert set(pulled["done"]) == keys
    objects = lock_digests(git_repo)
    assert pulled["stats"]["objects_fetched"] == len(objects)
    # per record one bounded read; per object its size, then its bytes: nothing else is asked
    assert pulled["stats"]["remote_calls"] == len(keys) + 2 * len(objects)
    assert heavy == []
    assert git(fresh, "status", "--porcelain") == ""


def test_push_verify_sends_again_what_someone_removed_from_the_remote(git_repo: Path, tmp_path: Path) -> None:
    """This machine's record of the remote cannot see a removal made elsewhere: a plain push says
    nothing is new, and says it from the record; `--verify` lists the remote and sends the record
    and the object that are gone, and a new stage makes a plain push list the remote again."""
    digits_specs(git_repo, 2)
    assert run_npuctl(git_repo, "apply").returncode == 0
    commit(git_repo)
    shared = tmp_path / "shared"
    url = f"file://{shared}"
    _sync(git_repo, "push", "--remote", url)
    gone_record = sorted((shared / "records").iterdir())[0]
    gone_record.unlink()
    gone_object = sorted(p for p in (shared / "objects").rglob("*") if p.is_file())[0]
    gone_object.unlink()

    stale = run_npuctl(git_repo, "push", "--remote", url)
    assert stale.returncode == 0 and "nothing new since the last push or pull here" in stale.stdout
    assert "--verify" in stale.stdout

    verified, _ = _sync(git_repo, "push", "--remote", url, "--verify")
    assert gone_record.stem in verified["done"]
    assert verified["stats"]["records_pushed"] == 1 and verified["stats"]["objects_pushed"] == 1
    assert gone_record.is_file() and gone_object.is_file()
    again, _ = _sync(git_repo, "push", "--remote", url)
    assert again["stats"]["remote_calls"] == 0 and again["done"] == []

    digits_specs(git_repo, 3)
    assert run_npuctl(git_repo, "apply", "--remote", "none").returncode == 0
    commit(git_repo, "a third spec")
    grown, _ = _sync(git_repo, "push", "--remote", url)
    assert len(grown["done"]) == 1 and "present_by_record" not in grown
    assert grown["stats"]["remote_calls"] > 0
