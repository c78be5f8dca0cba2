"""A no-op plan or apply of a settled repository prints what the full path prints, from the replay
file, and any change to what the output stands on goes back to the full path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from reconciler.state import statcache
from reconciler.state.statcache import RACY_NS
from tests.conftest import DIGITS_SPEC, copy_digits, run_npuctl


def _changed(path: Path) -> float:
    """When the file last changed, in seconds: what the racy rule measures (the later of mtime, ctime)."""
    st = path.stat()
    return max(st.st_mtime, st.st_ctime)


def _settle(repo: Path) -> None:
    newest = max(_changed(p) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    time.sleep(max(0.0, newest + RACY_NS / 1e9 + 0.2 - time.time()))


def _body(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith(("plan:", "apply:"))]


def _replays(repo: Path) -> list[Path]:
    return sorted((repo / ".npuctl" / "cache" / "replay").glob("*.json"))


def _recorded(repo: Path, names: tuple[str, ...]) -> None:
    """The digits specs `names` applied, settled past the racy window and planned until a plan
    records the replay file."""
    copy_digits(repo, eval_samples=6, calib_samples=0)
    for name in names:
        (repo / "specs" / f"{name}.yaml").write_text(DIGITS_SPEC.format(name=name))
    assert run_npuctl(repo, "apply").returncode == 0
    _settle(repo)
    for _ in range(3):
        assert run_npuctl(repo, "plan").returncode == 0
        if _replays(repo):
            break


def test_replayed_output_is_the_full_paths_and_a_change_goes_back_to_it(git_repo: Path) -> None:
    copy_digits(git_repo, eval_samples=6, calib_samples=0)
    for name in ("one", "two"):
        (git_repo / "specs" / f"{name}.yaml").write_text(DIGITS_SPEC.format(name=name))
    assert run_npuctl(git_repo, "apply").returncode == 0
    _settle(git_repo)
    for _ in range(3):  # full path: fills the settled cache, then the replay file
        full_plan = run_npuctl(git_repo, "plan")
        assert full_plan.returncode == 0, full_plan.stderr
        if _replays(git_repo):
            break
    assert len(_replays(git_repo)) == 1
    full_apply_text = run_npuctl(git_repo, "apply", env={"NPUCTL_REPLAY_PROBE": "1"})  # another key: full

    replayed_plan = run_npuctl(git_repo, "plan")
    replayed_apply = run_npuctl(git_repo, "apply")

    assert _body(replayed_plan.stdout) == _body(full_plan.stdout)
    assert _body(replayed_apply.stdout) == _body(full_apply_text.stdout)
    assert replayed_apply.returncode == full_apply_text.returncode == 0
    assert "exit 0" in replayed_apply.stdout.splitlines()[-1]
    off = run_npuctl(git_repo, "plan", env={"NPUCTL_NO_CACHE": "1"})  # every stat cache off: the full path
    assert _body(off.stdout) == _body(full_plan.stdout) and off.returncode == 0
    assert len(_replays(git_repo)) == 1  # and no replay recorded under its own key (NPUCTL_* is in it)
    # a replay stands on stats alone: neither the spec package nor the planner is imported
    probe = (
        "import sys\nsys.argv = ['npuctl', 'plan']\nfrom reconciler.cli import main\ntry:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('reconciler.spec', 'reconciler.engine.plan') if m in sys.modules))"
    )
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=git_repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert (
        _body(loaded.stdout)[:-1] == _body(full_plan.stdout) and loaded.stdout.splitlines()[-1] == "LOADED []"
    )

    # an SLO edit: the replay must not hide it
    spec = git_repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 0.000001"))
    edited = run_npuctl(git_repo, "plan")
    assert edited.returncode == 2 and "rejudge" in edited.stdout, edited.stdout
    # a new spec file in the folder
    spec.write_text(DIGITS_SPEC.format(name="one"))
    (git_repo / "specs" / "three.yaml").write_text(DIGITS_SPEC.format(name="three"))
    added = run_npuctl(git_repo, "plan")
    assert "three -> cpu" in added.stdout and added.returncode == 2, added.stdout


def test_a_changed_environment_or_format_is_not_replayed(git_repo: Path) -> None:
    _recorded(git_repo, ("one",))
    as_json = run_npuctl(git_repo, "plan", "--json")
    assert as_json.stdout.lstrip().startswith(("{", "["))
    missing = run_npuctl(git_repo, "plan", env={"NPUCTL_REMOTE": str(git_repo / "no-such-remote")})
    # text, json, and the run under another NPUCTL_REMOTE (its remote refused, so it ran without one):
    # each its own key, none served another's output
    assert len(_replays(git_repo)) == 3
    assert "exit" in missing.stderr + missing.stdout


def test_a_replay_recorded_beside_a_fresh_lock_reads_it_once_then_only_stats_it(git_repo: Path) -> None:
    copy_digits(git_repo, eval_samples=6, calib_samples=0)
    (git_repo / "specs" / "one.yaml").write_text(DIGITS_SPEC.format(name="one"))
    assert run_npuctl(git_repo, "apply").returncode == 0
    spec = git_repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 999"))
    _settle(git_repo)
    assert run_npuctl(git_repo, "apply").returncode == 0  # rewrites the lock, records the replay at once
    (file,) = _replays(git_repo)
    racy = lambda: [w[0] for w in json.loads(file.read_text())["paths"] if len(w) > 2]  # noqa: E731
    lock = git_repo / "specs" / "one.lock.json"
    assert str(lock) in racy()
    worth = statcache.worth_rewriting(lock.stat().st_size, file.stat().st_size)
    _settle(git_repo)
    first = run_npuctl(git_repo, "plan")
    # replayed; the lock kept by its stat alone when rewriting the file is worth it, else read again
    assert first.returncode == 0 and racy() == ([] if worth else [str(lock)])
    again = run_npuctl(git_repo, "plan")
    assert again.returncode == 0 and _body(again.stdout) == _body(first.stdout)
    assert _replays(git_repo) == [file]


_COUNTING = """\
import sys
sys.argv = ['npuctl', *sys.argv[1:]]
import reconciler.engine.plan as engine_plan
calls = []
for name in ('plan_read', 'plan_settled'):
    def counted(*args, _orig=getattr(engine_plan, name), _name=name):
        read = args[1]
        calls.append((_name, sorted(getattr(s, 'path', s).name for s in read)))
        return _orig(*args)
    setattr(engine_plan, name, counted)
import reconciler.state.statcache as statcache
read = []
def read_json(path, _orig=statcache.read_json):
    read.append(path.name)
    return _orig(path)
statcache.read_json = read_json
from reconciler.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
print('READ', sorted(set(read)))
print('CALLS', calls, 'EXIT', code)
"""


def _counted_plan(repo: Path, *args: str) -> tuple[list[str], str]:
    """`npuctl plan` as run_npuctl runs it (same interpreter and environment: the same replay key),
    with the planner's entry points counted: (its output lines, the calls line); `_read` then holds
    the cache files it read."""
    env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    done = subprocess.run(
        [sys.executable, "-c", _COUNTING, "plan", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    _read[:] = [lines[-2]]
    return [ln for ln in lines[:-2] if not ln.startswith(("plan:", "apply:"))], lines[-1]


_read: list[str] = []


def test_a_plan_after_an_edit_reads_only_the_changed_spec_and_prints_what_the_full_path_prints(
    git_repo: Path,
) -> None:
    _recorded(git_repo, ("one", "two", "three"))
    spec = git_repo / "specs" / "one.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 999"))
    full = run_npuctl(git_repo, "plan", env={"NPUCTL_NO_CACHE": "1"})
    assert full.returncode == 2 and "rejudge" in full.stdout, full.stdout

    kept = []
    for _ in range(2):  # the edited spec is not settled until applied: read again by every plan
        body, calls = _counted_plan(git_repo)
        assert calls == "CALLS [('plan_read', ['one.yaml'])] EXIT 2", calls
        assert body == _body(full.stdout)
        # the other specs' output is stored with the replay: neither they nor the settled cache are
        # read, nor the validated-spec cache (the edited spec cannot be in it)
        assert "settled.json" not in _read[0] and "specs.json" not in _read[0], _read
        kept.append([(f, f.stat().st_mtime_ns, f.stat().st_ino) for f in _replays(git_repo)])
    assert kept[1] == kept[0]  # the second found the record as the first left it: not written again
    for fmt in ("json", "markdown"):  # each format's pieces join to the full path's bytes
        full_fmt = run_npuctl(git_repo, "plan", "--format", fmt, env={"NPUCTL_NO_CACHE": "1"})
        for _ in range(3):  # the full path records the replay, then the partial path prints from it
            body, calls = _counted_plan(git_repo, "--format", fmt)
        assert calls == "CALLS [('plan_read', ['one.yaml'])] EXIT 2", calls
        assert body == _body(full_fmt.stdout), fmt

    # a changed spec that now claims another's name: found once planned, then the full path, which
    # names both files
    spec.write_text(spec.read_text().replace("name: one", "name: two"))
    body, calls = _counted_plan(git_repo)
    assert "('plan_settled', ['three.yaml'])]" in calls and calls.endswith("EXIT 1"), calls
    assert any("is also claimed by" in line for line in body), body
    # an invalid spec: the full path too, with the spec's error
    spec.write_text(spec.read_text().replace("target: cpu", "target: no-such-npu"))
    body, calls = _counted_plan(git_repo)
    assert calls.startswith("CALLS [('plan_settled', ") and calls.endswith("EXIT 1"), calls

    spec.write_text(DIGITS_SPEC.format(name="one").replace("p90: 1000", "p90: 999"))
    assert run_npuctl(git_repo, "apply").returncode == 0
    _settle(git_repo)
    body, calls = _counted_plan(git_repo)  # settled again: the whole output replayed, nothing planned
    assert calls == "CALLS [] EXIT 0", calls
