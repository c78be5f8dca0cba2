"""Sync apart from health in every output, one test per state, and lock integrity: the real digits model
in real git repositories, driven through the npuctl command."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.gitops.conftest import commit_all, edit

FAILING = DIGITS_SPEC.replace("p90: 1000", "p90: 0.000001")
"""The digits spec with a latency SLO no machine meets (a real measured failure)."""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two specs applied and committed: `digits` meets its SLOs, `slow` fails its latency SLO."""
    repo = tmp_path_factory.mktemp("sync-health") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=20, calib_samples=0)
    (repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    (repo / "specs" / "slow.yaml").write_text(FAILING.format(name="slow"))
    done = run_npuctl(repo, "apply")
    assert done.returncode == 3, done.stdout + done.stderr
    commit_all(repo, "applied")
    return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(template, copy, symlinks=True)
    return copy


def _json(repo: Path, *args: str, codes: tuple[int, ...] = (0,)) -> dict[str, dict[str, Any]]:
    done = run_npuctl(repo, *args, "--json")
    assert done.returncode in codes, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return {s["name"]: s for s in json.loads(done.stdout)["specs"]}


def _states(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["sync"], row["health"], row["status"]


def test_synced_and_healthy(repo: Path) -> None:
    for command in ("status", "plan"):
        assert _states(_json(repo, command)["digits"]) == ("Synced", "Healthy", "Healthy"), command
    assert _states(_json(repo, "apply", codes=(3,))["digits"]) == ("Synced", "Healthy", "Healthy")
    lock = json.loads((repo / "specs" / "digits.lock.json").read_text())
    assert (lock["sync"], lock["health"]) == ("Synced", "Healthy")


def test_degraded_reads_the_same_in_every_command(repo: Path) -> None:
    for command, codes in (("status", (0,)), ("plan", (0,)), ("apply", (3,))):
        assert _states(_json(repo, command, codes=codes)["slow"]) == ("Synced", "Degraded", "Degraded")
    assert json.loads((repo / "specs" / "slow.lock.json").read_text())["health"] == "Degraded"


def test_out_of_sync_and_unknown_while_evaluate_must_rebuild_and_nothing_runs(repo: Path) -> None:
    """Progressing means an operation in flight (Argo CD): a spec waiting for a rebuild is not."""
    edit(repo / "specs" / "digits.yaml", "runs: 5", "runs: 6")
    for command, codes in (("status", (0,)), ("plan", (2,))):
        assert _states(_json(repo, command, codes=codes)["digits"]) == ("OutOfSync", "Unknown", "OutOfSync")
    assert run_npuctl(repo, "status", "digits", "--exit-code").returncode == 3


def test_progressing_only_while_an_apply_holds_the_spec(repo: Path) -> None:
    from reconciler.repo import Layout
    from reconciler.state import locks

    with locks.hold(Layout(repo).locks, "spec-digits"):
        row = _json(repo, "status")["digits"]
        assert (row["health"], row["status"]) == ("Progressing", "Progressing")
        assert row["reason"].startswith("apply in progress")
        assert run_npuctl(repo, "status", "digits", "--exit-code").returncode == 3
    assert _states(_json(repo, "status")["digits"]) == ("Synced", "Healthy", "Healthy")


def test_a_never_built_spec_says_so_and_is_not_progressing(repo: Path) -> None:
    (repo / "specs" / "fresh.yaml").write_text(DIGITS_SPEC.format(name="fresh").replace("runs: 5", "runs: 7"))
    row = _json(repo, "status")["fresh"]
    assert _states(row) == ("OutOfSync", "Unknown", "OutOfSync")
    assert row["reason"].startswith("never built")
    text = run_npuctl(repo, "status", "fresh").stdout
    [header] = [line.split() for line in text.splitlines() if line.split()[:1] == ["spec"]]
    assert header[:5] == ["spec", "target", "status", "sync", "health"]
    [cells] = [line.split() for line in text.splitlines() if line.split()[:1] == ["fresh"]]
    assert cells[2:5] == ["OutOfSync", "OutOfSync", "Unknown"] and "never built" in " ".join(cells)


def test_status_exit_code_on_each_health(repo: Path) -> None:
    """apply's codes: 0 Healthy, 3 Degraded or Unknown, 1 Stalled or an argument naming no spec."""

    def code(*args: str) -> int:
        return run_npuctl(repo, "status", *args).returncode

    assert code("digits", "--exit-code") == 0
    assert code("slow", "--exit-code") == 3
    assert code("--exit-code") == 3, "the worst spec decides"
    assert code("slow") == 0, "without --exit-code status only reports"
    missing = run_npuctl(repo, "status", "specs/nothere.yaml", "--exit-code")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("npuctl status: specs/nothere.yaml: no such file or folder")
    assert code("specs/nothere.yaml") == 1
    edit(repo / "specs" / "digits.yaml", "runs: 5", "runs: 0")
    assert _states(_json(repo, "status")["digits"]) == ("Unknown", "Unknown", "Stalled")
    assert code("digits", "--exit-code") == 1
    text = run_npuctl(repo, "status", "digits").stdout
    [cells] = [line.split() for line in text.splitlines() if line.split()[:1] == ["digits"]]
    assert "Stalled" in cells, text


def test_a_spec_name_and_a_path_mean_the_same_spec_in_every_command(repo: Path, tmp_path: Path) -> None:
    for command in ("plan", "status"):
        rows = [_json(repo, command, arg) for arg in ("digits", "specs/digits.yaml")]
        assert rows[0] == rows[1] and list(rows[0]) == ["digits"], command
    for command in ("explain", "report"):
        pages = []
        for arg in ("digits", "specs/digits.yaml"):
            done = run_npuctl(repo, command, arg, "--json")
            assert done.returncode == 0, done.stderr
            page = json.loads(done.stdout)
            page.pop("generated", None)  # the clock
            pages.append(page)
        assert pages[0] == pages[1] and pages[0], command
    exported = [tmp_path / "by-name", tmp_path / "by-path"]
    for arg, dest in zip(("digits", "specs/digits.yaml"), exported, strict=True):
        done = run_npuctl(repo, "export", arg, str(dest))
        assert done.returncode == 0, done.stderr
    assert (exported[0] / "SHA256SUMS").read_text() == (exported[1] / "SHA256SUMS").read_text()


def test_a_typo_is_an_error_naming_it_not_a_stalled_spec(repo: Path) -> None:
    for command in ("plan", "apply", "status", "validate", "explain", "report", "artifacts"):
        done = run_npuctl(repo, command, "digitz")
        assert done.returncode == 1, command
        assert "Stalled" not in done.stdout + done.stderr, command
        assert done.stderr == (
            f"npuctl {command}: digitz: no such file or folder, and no spec under specs/ has that name; "
            "did you mean 'digits'?\n"
        ), done.stderr


def test_health_unknown_when_an_slo_is_met_only_on_an_estimate(repo: Path) -> None:
    edit(
        repo / "specs" / "digits.yaml",
        "    accuracy: {min: 0.5}\n",
        "    accuracy: {min: 0.5}\n    max_fallback_partitions: 100\n",
    )
    applied = _json(repo, "apply", codes=(3,))["digits"]
    estimate = next(v for v in applied["slo"] if v["name"] == "max_fallback_partitions")
    assert estimate["verdict"] == "met on estimate" and estimate["passed"] is None
    assert _states(applied) == ("Synced", "Unknown", "Unknown")
    assert _states(_json(repo, "status")["digits"]) == ("Synced", "Unknown", "Unknown")
    assert run_npuctl(repo, "status", "digits", "--exit-code").returncode == 3
    assert run_npuctl(repo, "apply", "specs/digits.yaml").returncode == 0, "not verifiable here is not failed"
    assert run_npuctl(repo, "apply", "specs/digits.yaml", "--strict").returncode == 3


def test_sync_unknown_for_an_invalid_spec(repo: Path) -> None:
    edit(repo / "specs" / "digits.yaml", "runs: 5", "runs: 0")
    row = _json(repo, "status")["digits"]
    assert _states(row) == ("Unknown", "Unknown", "Stalled")
    assert _states(_json(repo, "plan", codes=(1,))["digits"]) == ("Unknown", "Unknown", "Stalled")


def test_a_failed_slo_never_reads_ready_or_healthy_in_any_output(repo: Path) -> None:
    (repo / "specs" / "digits.yaml").unlink()
    (repo / "specs" / "digits.lock.json").unlink()
    outputs = []
    for command, codes in (("apply", (3,)), ("plan", (0,)), ("status", (0,))):
        formats = ("json", "text") if command == "status" else ("json", "text", "markdown")
        for fmt in formats:
            done = run_npuctl(repo, command, "--format", fmt)
            assert done.returncode in codes, f"{command} {fmt}: {done.returncode} {done.stderr}"
            outputs.append((f"{command} --format {fmt}", done.stdout))
            assert "slow" in done.stdout
    outputs.append(("lock", (repo / "specs" / "slow.lock.json").read_text()))
    page = repo / "slow.html"
    assert run_npuctl(repo, "report", "slow", "--output", str(page)).returncode == 0
    [badge] = re.findall(r"<h1>.*?</h1>", page.read_text(), re.S)
    outputs.append(("report badge", badge))
    for where, text in outputs:
        assert not re.search(r"\bReady\b|\bHealthy\b", text), f"{where} reads Ready/Healthy:\n{text}"
        assert "Degraded" in text, where


def _tamper(repo: Path) -> None:
    path = repo / "specs" / "slow.lock.json"
    lock = json.loads(path.read_text())
    [p90] = [v for v in lock["variants"]["default"]["verdicts"] if v["name"] == "latency_ms.p90"]
    assert p90["verdict"] == "fail"
    p90.update(passed=True, verdict="pass")
    lock["health"] = "Healthy"
    path.write_text(json.dumps(lock, sort_keys=True, indent=2) + "\n")


def test_a_hand_edited_verdict_is_reported_as_tampered_and_never_read_as_passed(
    repo: Path, tmp_path: Path
) -> None:
    _tamper(repo)
    validate = run_npuctl(repo, "validate")
    assert validate.returncode == 1
    [line] = [ln for ln in validate.stdout.splitlines() if "tampered" in ln]
    assert line.startswith("specs/slow.lock.json: variants.default.verdicts[0] (latency_ms.p90).passed:")
    plan = run_npuctl(repo, "plan", "--json")
    assert plan.returncode == 1
    slow = {s["name"]: s for s in json.loads(plan.stdout)["specs"]}["slow"]
    assert any("tampered" in p and "slow.lock.json" in p for p in slow["lock_problems"])
    assert slow["health"] != "Healthy" and slow["sync"] == "Unknown"
    status = _json(repo, "status")["slow"]
    assert status["lock_problems"] and status["health"] != "Healthy"
    assert not any(v.get("passed") is True and v["name"] == "latency_ms.p90" for v in status["verdicts"])
    commit_all(repo, "hand-edited verdict")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    fresh = {s["name"]: s for s in json.loads(run_npuctl(clone, "plan", "--json").stdout)["specs"]}["slow"]
    assert fresh["lock_problems"] and fresh["health"] != "Healthy"
    # its own lock is not used; digits' (same model, data and evaluate settings) records the true p90
    p90 = next(v for v in fresh["slo"] if v["name"] == "latency_ms.p90")
    assert (p90["passed"], p90["verdict"]) == (False, "fail")
