"""A no-op apply writes nothing: no lock or owner file, no database transaction, no lock file rewrite.

Checked the way a user would notice it: every file under the repository (the spec folder, `.npuctl`
with its store, state database and locks) keeps its mtime, size and inode, and no file appears or
disappears.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import time
from pathlib import Path

from reconciler.engine.apply import apply_all
from reconciler.engine.plan import plan_all
from reconciler.engine.reporter import Reporter
from reconciler.engine.workspace import Workspace
from reconciler.spec import check
from reconciler.state.statcache import RACY_NS
from tests.conftest import DIGITS_SPEC, copy_digits, run_npuctl


def _changed(path: Path) -> float:
    """When the file last changed, in seconds: what the racy rule measures (the later of mtime, ctime)."""
    st = path.stat()
    return max(st.st_mtime, st.st_ctime)


def _files(repo: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, repo)] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


def test_noop_apply_leaves_every_file_untouched(git_repo: Path) -> None:
    copy_digits(git_repo, eval_samples=10, calib_samples=0)
    for name in ("one", "two"):
        (git_repo / "specs" / f"{name}.yaml").write_text(DIGITS_SPEC.format(name=name))
    reports = check([git_repo / "specs"], git_repo)
    specs = [r.spec for r in reports if r.spec is not None]
    shared = [copy.deepcopy(s.spec_json) for s in specs]
    ws = Workspace.open(git_repo)
    try:  # the first apply in this process: spec values are shared, never copied, and never modified
        results = apply_all(ws, specs, Reporter())
        plan_all(ws, specs)
    finally:
        ws.close()
    assert [r.status for r in results] == ["Healthy", "Healthy"], [r.errors for r in results]
    assert [s.spec_json for s in specs] == shared
    # a file changed within RACY_NS is never cached (same-tick rewrites keep their stat): past that, the
    # read command below fills every cache, and a plan and an apply straddling it cannot differ
    newest = max(_changed(p) for p in git_repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    time.sleep(max(0.0, newest + RACY_NS / 1e9 + 0.2 - time.time()))
    run_npuctl(git_repo, "plan")  # caches filled by a read command are no write of the no-op either
    before = _files(git_repo)
    assert any(p.startswith(".npuctl") for p in before) and "specs/one.lock.json" in before

    again = run_npuctl(git_repo, "apply")

    assert again.returncode == 0, again.stdout + again.stderr
    assert "built" not in {s for line in again.stdout.splitlines() for s in line.split()[:3]}
    after = _files(git_repo)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == [], f"a no-op apply touched: {changed}"

    # no write transaction either: it finishes while another connection holds the database's write lock
    holder = sqlite3.connect(git_repo / ".npuctl" / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        blocked = run_npuctl(git_repo, "apply", timeout=120)  # a writer would wait 60 s, then fail
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr


def test_apply_after_an_edit_still_writes_its_lock(git_repo: Path) -> None:
    """The other side: skipping the lock never skips real work (an SLO edit re-judges and rewrites)."""
    copy_digits(git_repo, eval_samples=10, calib_samples=0)
    spec = git_repo / "specs" / "one.yaml"
    spec.write_text(DIGITS_SPEC.format(name="one"))
    assert run_npuctl(git_repo, "apply").returncode == 0
    lock = git_repo / "specs" / "one.lock.json"
    old = lock.read_text()
    spec.write_text(DIGITS_SPEC.format(name="one").replace("p90: 1000", "p90: 999"))

    done = run_npuctl(git_repo, "apply")

    assert done.returncode == 0, done.stdout + done.stderr
    assert lock.read_text() != old and '"p90": 999' in lock.read_text()
