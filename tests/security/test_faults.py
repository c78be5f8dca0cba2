"""Infrastructure faults on real file systems (tmpfs mounts made by the test; it runs as root): a full
store, a full database, a read-only store, a read-only spec folder, a committed `.npuctl` symlink and a
lost state.db. Each fault is one spec's one-line error naming the path; the spec that needs nothing
carries on; committed lock files keep their evidence; the next run on a healthy disk succeeds."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.engine.workspace import Workspace
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl


def _mount_works(tmp: Path) -> bool:
    probe = tmp / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
    )
    if done.returncode != 0:
        return False
    subprocess.run(["umount", str(probe)], check=True)
    return True


@contextlib.contextmanager
def tmpfs(where: Path, extra_kib: int, read_only: bool = False) -> Iterator[None]:
    """`where` on its own tmpfs holding its current content plus `extra_kib` of free space."""
    saved = where.with_name(where.name + ".saved")
    shutil.move(where, saved)
    where.mkdir()
    used = sum(p.stat().st_size for p in saved.rglob("*") if p.is_file()) // 1024
    size = used + 64 + extra_kib  # + inodes and block rounding
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(where)], check=True)
    try:
        subprocess.run(["cp", "-a", f"{saved}/.", str(where)], check=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield
    finally:
        subprocess.run(["cp", "-a", f"{where}/.", str(saved)], check=False)
        subprocess.run(["umount", "-l", str(where)], check=True)
        where.rmdir()
        shutil.move(saved, where)


@pytest.fixture
def repo(built_repo: Path, tmp_path: Path) -> Path:
    if not _mount_works(tmp_path):
        pytest.fail("mount -t tmpfs is refused here: the fault tests need root and mount")
    return built_repo


def _change_a(repo: Path) -> None:
    """A change that makes `a` compile a new artifact (and so write to the store)."""
    spec = repo / "specs" / "a.yaml"
    spec.write_text(spec.read_text().replace("  slo:", "  compile: {optimization_level: 1}\n  slo:"))


def _results(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads(done.stdout)["specs"]}


def _committed_evidence_kept(repo: Path) -> None:
    """Every committed lock file still holds its verdicts and measurements (0 lost evidence)."""
    for name in ("a", "b"):
        committed = json.loads(git(repo, "show", f"HEAD:specs/{name}.lock.json"))
        now = json.loads((repo / "specs" / f"{name}.lock.json").read_text())
        for variant, data in committed["variants"].items():
            assert now["variants"][variant]["verdicts"], name
            kept = {v["name"] for v in now["variants"][variant]["verdicts"] if v.get("value") is not None}
            assert {v["name"] for v in data["verdicts"] if v.get("value") is not None} <= kept, name


def _one_line_naming(errors: list[str], path: Path) -> None:
    text = " ".join(f"{e['reason']}" if isinstance(e, dict) else e for e in errors)
    assert str(path) in text, errors
    assert all("\n" not in (e["reason"] if isinstance(e, dict) else e) for e in errors)
    assert "internal error" not in text and "crashed" not in text, errors


def _failure_lines(entry: dict) -> list:
    return [s for s in entry["stages"] if s["action"] == "failed"] + list(entry["errors"])


@pytest.mark.parametrize("fault", ["store-full", "store-read-only", "toolchain-output-full"])
def test_store_faults(repo: Path, fault: str) -> None:
    store = repo / ".npuctl" / ("tmp" if fault == "toolchain-output-full" else "store")
    _change_a(repo)
    with tmpfs(store, extra_kib=8, read_only=fault == "store-read-only"):
        done = run_npuctl(repo, "apply", "--json")
        assert done.returncode == 1, done.stderr
        results = _results(done)
        _one_line_naming(_failure_lines(results["a"]), store)
        assert results["b"]["health"] == "Healthy"  # needed nothing: carried on
        _committed_evidence_kept(repo)
    again = run_npuctl(repo, "apply", "--json")
    assert again.returncode == 0, again.stdout[-2000:]
    assert {s["name"]: s["action"] for s in _results(again)["a"]["stages"]}["compile"] == "built"


def test_database_full(repo: Path) -> None:
    state = repo / ".npuctl"
    _change_a(repo)
    with tmpfs(state, extra_kib=0):
        fill = state / "filler"
        with contextlib.suppress(OSError), fill.open("wb") as fh:
            while True:
                fh.write(bytes(4096))
                fh.flush()
        done = run_npuctl(repo, "apply", "--json")
        assert done.returncode == 1
        assert "internal error" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        if done.stdout.strip():
            assert _results(done)["a"]["health"] != "Healthy"
        else:  # the database cannot even be opened: one line naming it
            assert str(state) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        _committed_evidence_kept(repo)
        fill.unlink()
    again = run_npuctl(repo, "apply", "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]


def test_read_only_spec_folder_keeps_its_lock_files(repo: Path) -> None:
    specs = repo / "specs"
    _change_a(repo)
    with tmpfs(specs, extra_kib=0, read_only=True):
        done = run_npuctl(repo, "apply", "--json")
        assert done.returncode == 1
        _one_line_naming(_failure_lines(_results(done)["a"]), specs)
        _committed_evidence_kept(repo)
    assert run_npuctl(repo, "apply").returncode == 0


def test_committed_npuctl_symlink_is_refused(git_repo: Path, tmp_path: Path) -> None:
    copy_digits(git_repo, eval_samples=4, calib_samples=0)
    (git_repo / "specs" / "a.yaml").write_text(DIGITS_SPEC.format(name="a"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (git_repo / ".npuctl").symlink_to(elsewhere)
    done = run_npuctl(git_repo, "apply")
    assert done.returncode == 1
    assert "is a symlink" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(elsewhere.iterdir()) == []  # no state moved outside


def test_lost_state_db_is_reseeded_from_lock_files_and_store(repo: Path) -> None:
    for path in (repo / ".npuctl").glob("state.db*"):
        path.unlink()
    spec = repo / "specs" / "a.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 6"))
    done = run_npuctl(repo, "apply", "--json")
    assert done.returncode == 0, done.stderr
    actions = {s["name"]: s["action"] for s in _results(done)["a"]["stages"]}
    assert actions["evaluate"] == "built"
    assert [n for n, a in actions.items() if a == "built"] == ["evaluate"]  # nothing else rebuilt
    assert all(s["action"] == "cached" for s in _results(done)["b"]["stages"])


def test_database_filling_mid_run(repo: Path) -> None:
    """The disk under .npuctl (store and state.db) fills while an apply runs: right after its first
    stage finished, a filler takes every free byte. The run ends with one line per failure naming the
    path, no internal error; the database and the store stay sound and the committed lock files keep
    their evidence; the next run on a healthy disk builds what was left."""
    state = repo / ".npuctl"
    for name in ("a", "b"):
        spec = repo / "specs" / f"{name}.yaml"
        spec.write_text(spec.read_text().replace("runs: 5", "runs: 7").replace("runs: 4", "runs: 8"))
    _change_a(repo)
    with tmpfs(state, extra_kib=1024):
        env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "reconciler", "apply", "--json"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first stage that did work
        assert first.startswith("npuctl: "), first
        fill = state / "filler"
        with contextlib.suppress(OSError), fill.open("wb") as fh:
            while True:
                fh.write(bytes(1 << 16))
                fh.flush()
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, (out[-2000:], err[-2000:])
        text = out + err
        assert "internal error" not in text and "Traceback" not in text, text[-3000:]
        results = _results(subprocess.CompletedProcess([], 1, out, err))  # every spec is reported
        lines = [f for name in ("a", "b") for f in _failure_lines(results[name])]
        assert lines, results
        _one_line_naming(lines, state)
        assert "(no path)" not in json.dumps(lines), lines
        integrity = sqlite3.connect(state / "state.db").execute("PRAGMA integrity_check").fetchone()
        assert integrity == ("ok",)
        _committed_evidence_kept(repo)
        fill.unlink()
    ws = Workspace.open(repo)
    try:
        assert ws.store.verify() == []
    finally:
        ws.close()
    again = run_npuctl(repo, "apply", "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert {s["name"]: s["action"] for s in _results(again)["a"]["stages"]}["evaluate"] == "built"


NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
"""Root without the capabilities that let it ignore permission bits: the tests run as root, and the
Python here lives under /root (0700), so an unprivileged user could not even start npuctl."""


@pytest.mark.parametrize("where", ["store", "specs"])
def test_permission_denied_is_one_line_naming_the_path(repo: Path, where: str) -> None:
    """The store's folders (or the spec folder, where lock files are written) are made 0555 and npuctl
    runs without CAP_DAC_OVERRIDE: a real EACCES. The spec that must write fails in one line naming
    the path, the other carries on, the committed evidence stays, and the next run builds."""
    target = repo / ".npuctl" / "store" if where == "store" else repo / "specs"
    folders = [target, *(p for p in target.rglob("*") if p.is_dir())]
    _change_a(repo)
    modes = {p: p.stat().st_mode for p in folders}
    for p in folders:
        p.chmod(0o555)
    try:
        env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
        argv = [*NO_DAC, sys.executable, "-I", "-m", "reconciler", "apply", "--json"]
        done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    results = _results(done)
    lines = _failure_lines(results["a"])
    _one_line_naming(lines, target)
    assert "Permission denied" in json.dumps(lines), lines
    assert results["b"]["health"] == "Healthy"
    _committed_evidence_kept(repo)
    again = run_npuctl(repo, "apply", "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]


@pytest.mark.slow
def test_openvino_on_a_full_disk_says_so_in_one_line(git_repo: Path, tmp_path: Path) -> None:
    """OpenVINO writing its IR to a full disk says `basic_ios::clear: iostream error`; the compile
    stage's failure names the full folder and the cause in one line, and the next run builds."""
    pytest.importorskip("openvino")
    if not _mount_works(tmp_path):
        pytest.fail("mount -t tmpfs is refused here: the fault tests need root and mount")
    copy_digits(git_repo, eval_samples=2, calib_samples=0)
    spec = git_repo / "specs" / "ov.yaml"
    spec.write_text(DIGITS_SPEC.format(name="ov").replace("target: cpu", "target: intel-npu"))
    first = run_npuctl(git_repo, "apply")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    spec.write_text(spec.read_text().replace("  slo:", "  compile: {optimization_level: 1}\n  slo:"))
    scratch = git_repo / ".npuctl" / "tmp"
    with tmpfs(scratch, extra_kib=512):
        fill = scratch / "filler"
        with contextlib.suppress(OSError), fill.open("wb") as fh:
            while True:
                fh.write(bytes(4096))
                fh.flush()
        # room for the stage's input model (copied in first), not for the IR OpenVINO writes
        room = (git_repo / "models" / "digits.onnx").stat().st_size + (16 << 10)
        os.truncate(fill, fill.stat().st_size - room)
        done = run_npuctl(git_repo, "apply", "--json")
        fill.unlink()
    assert done.returncode == 1, done.stderr[-2000:]
    [compile_] = [s for s in _results(done)["ov"]["stages"] if s["name"] == "compile"]
    assert compile_["action"] == "failed", compile_
    reason = compile_["reason"]
    assert "\n" not in reason and str(scratch) in reason and "no space left on device" in reason.lower(), (
        reason
    )
    print(reason)
    again = run_npuctl(git_repo, "apply", "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
