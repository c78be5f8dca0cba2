"""A file:// remote (a shared folder) through the CLI: plan sees remote records without downloading,
apply fetches them, and a configuration naming a credential is refused with its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.remote.conftest import clone, stored

pytestmark = pytest.mark.slow


def test_plan_reads_the_remote_apply_fetches_and_a_credential_in_the_config_is_refused(
    tmp_path: Path,
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n*.lock.json\n")  # this team does not commit lock files
    (dev / "specs").mkdir()
    copy_digits(dev, eval_samples=8, calib_samples=4)
    (dev / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    (dev / ".npuctl.yaml").write_text(f"remote:\n  url: file://{tmp_path / 'shared'}\n")
    assert run_npuctl(dev, "apply").returncode == 0
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "specs")

    fresh = clone(dev, tmp_path / "fresh")
    planned = run_npuctl(fresh, "plan", "--json")
    assert planned.returncode == 2, planned.stderr  # the lock file is still to be written
    stages = json.loads(planned.stdout)["specs"][0]["stages"]
    real = [s for s in stages if not s["identity"] and s["name"] != "verify"]
    assert {(s["action"], s["reason"]) for s in real} == {("cached", "in the remote cache")}
    assert stored(fresh) == set()  # plan moved no artifact
    applied = run_npuctl(fresh, "apply", "--json")
    assert applied.returncode == 0, applied.stderr
    stages = json.loads(applied.stdout)["specs"][0]["stages"]
    assert {s["action"] for s in stages if not s["identity"]} == {"cached"}  # 0 built: all fetched
    assert stored(fresh) == stored(dev)

    (fresh / ".npuctl.yaml").write_text(
        f"remote:\n  url: file://{tmp_path / 'shared'}\n  options:\n    password: hunter2\n"
    )
    refused = run_npuctl(fresh, "plan")
    line = next(ln for ln in refused.stderr.splitlines() if "refused" in ln)
    assert ".npuctl.yaml:4:5: remote.options.password: looks like a credential" in line
    assert refused.returncode == 0  # the run goes on, without the remote
    assert run_npuctl(fresh, "push").returncode == 1


def test_plan_base_does_not_follow_a_remote_the_pull_request_changed(tmp_path: Path) -> None:
    """A pull request that points `.npuctl.yaml` at a remote of its choosing: `plan --base main`
    warns and keeps reading main's remote, unless the job pins one (NPUCTL_REMOTE)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n*.lock.json\n")
    (dev / "specs").mkdir()
    copy_digits(dev, eval_samples=8, calib_samples=4)
    (dev / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    (dev / ".npuctl.yaml").write_text(f"remote:\n  url: file://{tmp_path / 'team'}\n")
    assert run_npuctl(dev, "apply").returncode == 0  # the team's remote holds every stage
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "specs")

    pr = clone(dev, tmp_path / "pr")
    git(pr, "checkout", "-qb", "pr")
    (pr / ".npuctl.yaml").write_text(f"remote:\n  url: file://{tmp_path / 'elsewhere'}\n")
    git(pr, "commit", "-qam", "a remote of the pull request's choosing")
    planned = run_npuctl(pr, "plan", "--base", "main", "--json")
    warnings = [ln for ln in planned.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "not followed, plan reads main's (file://" in warnings[0], planned.stderr
    stages = json.loads(planned.stdout)["specs"][0]["stages"]
    real = [s for s in stages if not s["identity"] and s["name"] != "verify"]
    assert {s["reason"] for s in real} == {"in the remote cache"}  # read from the team's remote
    assert not (tmp_path / "elsewhere").exists()

    pinned = run_npuctl(
        pr, "plan", "--base", "main", "--json", env={"NPUCTL_REMOTE": f"file://{tmp_path / 'pin'}"}
    )
    assert "warning" not in pinned.stderr  # the job chose its remote: nothing to refuse
    stages = json.loads(pinned.stdout)["specs"][0]["stages"]
    assert "in the remote cache" not in {s["reason"] for s in stages}
