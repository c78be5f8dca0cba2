"""An edit in place that keeps a file's size and mtime (a tool that restores the mtime) is still seen:
the file-hash cache keys on ctime too, which the kernel moves on every change and no program can set.
The model edited so is rebuilt by plan, status and apply; a store object edited so is found by fsck."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import onnx

from reconciler.state import statcache
from tests.conftest import run_npuctl


def _edit_keeping_size_and_mtime(path: Path, offset: int) -> None:
    before = path.stat()
    time.sleep(statcache.RACY_NS / 1e9)  # past the clock tick, so the ctime can move
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert after.st_ctime_ns != before.st_ctime_ns


def _weight_offset(model: Path) -> int:
    """A byte inside the first float weight's raw data: flipping its lowest bit keeps a valid model."""
    weights = next(t for t in onnx.load(str(model)).graph.initializer if t.raw_data and t.data_type == 1)
    at = model.read_bytes().find(weights.raw_data)
    assert at > 0
    return at


def test_an_in_place_edit_keeping_size_and_mtime_is_seen_by_plan_status_apply_and_fsck(
    digits_repo: Path,
) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    time.sleep(statcache.RACY_NS / 1e9 + 0.05)
    assert run_npuctl(digits_repo, "plan").returncode == 0  # every stat now trusted and cached
    lock = digits_repo / "specs" / "digits.lock.json"
    recorded = json.loads(lock.read_text())["sources"]["files"]["model"]
    model = digits_repo / "models" / "digits.onnx"
    _edit_keeping_size_and_mtime(model, _weight_offset(model))

    plan = run_npuctl(digits_repo, "plan")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert any(line.split()[:3] == ["import", "default", "build"] for line in plan.stdout.splitlines()), (
        plan.stdout
    )
    status = json.loads(run_npuctl(digits_repo, "status", "--json").stdout)["specs"][0]
    assert status["sync"] == "OutOfSync", status
    applied = run_npuctl(digits_repo, "apply")
    assert applied.returncode in (0, 3), applied.stdout + applied.stderr
    assert json.loads(lock.read_text())["sources"]["files"]["model"] != recorded

    # fsck re-hashes every store object in full: one edited the same way is found
    store = digits_repo / ".npuctl" / "store"
    victim = max((p for p in store.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    os.chmod(victim, 0o644)
    _edit_keeping_size_and_mtime(victim, victim.stat().st_size // 2)
    done = run_npuctl(digits_repo, "fsck", "--check-only")
    corrupt = [ln.split()[1] for ln in done.stdout.splitlines() if ln.startswith("corrupt: ")]
    assert done.returncode == 1 and len(corrupt) == 1 and corrupt[0].endswith(victim.name), done.stdout
