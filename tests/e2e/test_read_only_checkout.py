"""plan and status on a read-only checkout (a CI cache restored read-only, a shared NFS export): they
answer from the committed locks and whatever state is there, and write nothing.

The checkout is made read-only by a real read-only bind mount in a private mount namespace (`unshare
-rm`), which stops root too (chmod does not); where user namespaces are not allowed the test is skipped
rather than replaced by a weaker one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, run_npuctl

MOUNT_RO = 'mount --bind -o ro "$1" "$1" && cd "$1" && shift && exec "$@"'


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True)
    return probe.returncode == 0


def _read_only(repo: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` run in `repo` mounted read-only; `npuctl ...` runs this interpreter's npuctl."""
    if command[0] == "npuctl":
        command = (sys.executable, "-m", "reconciler", *command[1:])
    mounted = ["unshare", "-rm", "sh", "-c", MOUNT_RO, "sh", str(repo), *command]
    env = {**os.environ, "CI": "1"}
    return subprocess.run(mounted, env=env, capture_output=True, text=True, timeout=600)


def _listing(repo: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file())


@pytest.mark.skipif(
    not _can_mount(), reason="no user and mount namespaces here: cannot make a read-only mount"
)
def test_plan_and_status_work_on_a_read_only_checkout(digits_repo: Path, tmp_path: Path) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    git(digits_repo, "add", "-A")
    git(digits_repo, "commit", "-qm", "applied")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(digits_repo), str(clone))
    for state in ("none", "left by an earlier run"):
        if state != "none":
            assert run_npuctl(clone, "plan").returncode == 0
        before = _listing(clone)
        denied = _read_only(clone, "touch", "probe")  # the mount really stops writes, by root too
        assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied.stderr
        status = _read_only(clone, "npuctl", "status", "--json")
        assert status.returncode == 0, (state, status.stderr)
        row = json.loads(status.stdout)["specs"][0]
        assert (row["status"], row["slo_passed"]) == ("Healthy", 2), json.dumps(row)
        plan = _read_only(clone, "npuctl", "plan")
        assert plan.returncode == 0, (state, plan.stdout, plan.stderr)
        assert _listing(clone) == before and (state != "none" or not (clone / ".npuctl").exists())
