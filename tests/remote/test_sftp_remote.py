"""The remote cache over SFTP, against a real sshd on 127.0.0.1 started by the test (the runner tests'
fixture): a developer's apply pushes, a fresh clone builds nothing, and a remote that dies mid-run
leaves a correct local build."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.backends.runners.conftest import Sshd
from tests.conftest import DIGITS_SPEC, git, run_npuctl
from tests.remote.conftest import clone, commit, digits_specs, lock_bytes, lock_digests, sftp_env, stored

pytestmark = pytest.mark.slow


def _dev_repo(tmp_path: Path, server: Sshd, specs: int) -> tuple[Path, Path]:
    dev = tmp_path / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    digits_specs(dev, specs)
    remote_dir = tmp_path / "remote-root"
    url = f"sftp://{server.user}@127.0.0.1:{server.port}{remote_dir}"
    (dev / ".npuctl.yaml").write_text(f"remote:\n  url: {url}\n")
    return dev, remote_dir


def _fetched_rows(db: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
            return int(conn.execute("SELECT count(*) FROM ledger WHERE action = 'fetched'").fetchone()[0])
    except sqlite3.Error:
        return 0


def _kill(server: Sshd) -> None:
    """The remote goes away: the sshd this test started, and its sessions, get SIGKILL."""
    for pid in server.sessions():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    server.process.kill()
    server.process.wait()


def test_fresh_clone_downloads_everything_and_a_remote_dying_mid_run_leaves_a_correct_build(
    sshd: Sshd, tmp_path: Path
) -> None:
    dev, remote_dir = _dev_repo(tmp_path, sshd, specs=3)
    env = sftp_env(sshd)
    built = run_npuctl(dev, "apply", env=env)
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr
    records = sorted(p.stem for p in (remote_dir / "records").glob("*.json"))
    assert len(records) == 3 + 3  # import, check, compile shared; one evaluate per spec
    commit(dev)

    fresh = clone(dev, tmp_path / "fresh")
    assert not (fresh / ".npuctl").exists()
    done = run_npuctl(fresh, "apply", "--json", env=env)
    assert done.returncode == 0, done.stderr
    stages = [s for spec in json.loads(done.stdout)["specs"] for s in spec["stages"]]
    assert [s for s in stages if s["action"] != "cached"] == []
    fetched = [s["key"] for s in stages if s["reason"] == "fetched from the remote cache (verified)"]
    assert sorted(fetched) == records  # each key once; specs after the first share what it fetched
    assert lock_digests(dev) <= stored(fresh)  # every artifact downloaded
    assert lock_bytes(fresh) == lock_bytes(dev)
    assert git(fresh, "status", "--porcelain") == ""

    # A clone with one new spec over the same model; the remote dies once the run has fetched something.
    late = clone(dev, tmp_path / "late")
    (late / "specs" / "digits-new.yaml").write_text(
        DIGITS_SPEC.format(name="digits-new").replace("runs: 5", "runs: 9")
    )
    command = [sys.executable, "-m", "reconciler", "apply", "--json"]
    proc = subprocess.Popen(
        command,
        cwd=late,
        env={**os.environ, "CI": "1", "NPUCTL_REMOTE_TIMEOUT_S": "20", **env},  # a transfer cut mid-way
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while _fetched_rows(late / ".npuctl" / "state.db") == 0 and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    _kill(sshd)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "continuing without the remote" in warnings[0], err
    result = {spec["name"]: spec for spec in json.loads(out)["specs"]}
    new_evaluate = next(s for s in result["digits-new"]["stages"] if s["name"] == "evaluate")
    assert new_evaluate["action"] == "built"
    assert all(spec["sync"] == "Synced" and spec["health"] == "Healthy" for spec in result.values())
    locks = lock_bytes(late)
    assert {k: v for k, v in locks.items() if k != "digits-new.lock.json"} == lock_bytes(dev)
    new = json.loads(locks["digits-new.lock.json"])["variants"]["default"]["stages"]
    old = json.loads(locks["digits-0.lock.json"])["variants"]["default"]["stages"]
    assert [new[s]["key"] for s in ("import", "check", "compile")] == [
        old[s]["key"] for s in ("import", "check", "compile")
    ]
    assert {a["digest"] for s in new.values() for a in s["artifacts"].values()} <= stored(late)
    check = run_npuctl(late, "fsck", "--check-only", env={"NPUCTL_REMOTE": "none"})
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_ssh_url_is_the_same_sftp_remote(sshd: Sshd, tmp_path: Path) -> None:
    """`ssh://` names the SFTP remote too (sshfs serves both schemes, with the same fsspec
    configuration): a developer's apply pushes through it and a fresh clone builds nothing."""
    dev, remote_dir = _dev_repo(tmp_path, sshd, specs=1)
    config = (dev / ".npuctl.yaml").read_text()
    (dev / ".npuctl.yaml").write_text(config.replace("url: sftp://", "url: ssh://"))
    env = sftp_env(sshd)
    built = run_npuctl(dev, "apply", env=env)
    assert built.returncode == 0 and "warning" not in built.stderr, built.stderr
    records = sorted(p.stem for p in (remote_dir / "records").glob("*.json"))
    assert len(records) == 4  # import, check, compile, evaluate
    commit(dev)

    fresh = clone(dev, tmp_path / "fresh")
    done = run_npuctl(fresh, "apply", "--json", env=env)
    assert done.returncode == 0, done.stderr
    stages = [s for spec in json.loads(done.stdout)["specs"] for s in spec["stages"]]
    assert [s for s in stages if s["action"] != "cached"] == []
    assert sorted(s["key"] for s in stages if s["reason"].startswith("fetched from the remote")) == records
    assert lock_bytes(fresh) == lock_bytes(dev)
