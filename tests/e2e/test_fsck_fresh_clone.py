"""fsck on a fresh clone: objects the lock files record but no local record names were built elsewhere,
which is normal (the lock is the record that travels), not missing."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, run_npuctl


def test_a_fresh_clone_is_clean_for_fsck(digits_repo: Path, tmp_path: Path) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    git(digits_repo, "add", "-A")
    git(digits_repo, "commit", "-qm", "applied")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(digits_repo), str(clone))
    done = run_npuctl(clone, "fsck")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recorded only in the lock files" in done.stdout and "missing:" not in done.stdout
    # the developer's clone, whose records name those objects, still reports a deleted one as missing
    store = digits_repo / ".npuctl" / "store"
    victim = next(p for p in store.rglob("*") if p.is_file())
    victim.unlink()
    broken = run_npuctl(digits_repo, "fsck", "--check-only")
    assert broken.returncode == 1 and "missing:" in broken.stdout
