"""audit over real git history of lock files: entries, summary, failing streaks, filters, merges."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from reconciler.audit import Filters, run
from reconciler.audit.query import AuditError, parse_date
from tests.audit.conftest import commit, lock, sha, write_lock
from tests.conftest import ROOT, git

LOCK_SCHEMA = json.loads((ROOT / "schemas" / "lock.schema.json").read_text())


@pytest.fixture
def history(git_repo: Path) -> dict[str, str]:
    """v1 passes; v2 fails latency; v2 on a new ORT still fails; a README commit in between."""
    repo = git_repo
    shas = {}
    write_lock(repo, lock())
    shas["v1"] = commit(repo, "digits v1", "2026-01-10T10:00:00+00:00")
    (repo / "README.md").write_text("docs\n")
    commit(repo, "docs only", "2026-01-11T10:00:00+00:00")
    write_lock(repo, lock(version="v2", model_file="model-v2", latency=9.0))
    shas["v2"] = commit(repo, "digits v2", "2026-01-12T10:00:00+00:00")
    write_lock(repo, lock(version="v2", model_file="model-v2", latency=8.0, ort="1.33.0"))
    shas["ort"] = commit(repo, "bump onnxruntime", "2026-01-13T10:00:00+00:00")
    write_lock(repo, lock(spec="other", target="rk3588", version="o1", model_file="other"))
    shas["other"] = commit(repo, "other spec", "2026-01-14T10:00:00+00:00")
    return shas


def test_synthetic_locks_are_valid_lock_files() -> None:
    jsonschema.validate(lock(), LOCK_SCHEMA)


def test_every_commit_that_changed_a_lock_is_an_entry_newest_first(
    git_repo: Path, history: dict[str, str]
) -> None:
    audit = run(git_repo, [], Filters())
    labels = [(e.spec, e.commit) for e in audit.entries]
    assert labels == [
        ("other", history["other"]),
        ("digits", history["ort"]),
        ("digits", history["v2"]),
        ("digits", history["v1"]),
    ]
    ort = audit.entries[1]
    assert ort.subject == "bump onnxruntime" and ort.model_version == "v2"
    assert ort.model_file_digest == sha("model-v2") and ort.model_digest == sha("imported model-v2")
    assert ort.toolchains["compile"]["fingerprint"] == {"onnxruntime": "1.33.0"}
    assert "quantize" not in ort.toolchains, "identity stages have no toolchain"
    assert ort.state == "fail"
    assert {v.name: v.value for v in ort.verdicts} == {"latency_ms.p90": 8.0, "accuracy.min": 0.97}


def test_summary_answers_which_model_version_meets_which_slo(git_repo: Path, history: dict[str, str]) -> None:
    summary = run(git_repo, [], Filters()).summary()
    rows = {(r.spec, r.model_version, r.settings["toolchain"]): r for r in summary}
    assert len(rows) == len(summary), "one row per model version and settings"
    ort_32 = "onnx 1.23.2, onnxruntime 1.32.0"
    assert set(rows) == {
        ("digits", "v1", ort_32),
        ("digits", "v2", ort_32),
        ("digits", "v2", "onnx 1.23.2, onnxruntime 1.33.0"),
        ("other", "o1", ort_32),
    }, "the ORT bump of v2 is a row of its own, like a changed parameter in `dvc exp show`"
    v1, v2 = rows[("digits", "v1", ort_32)], rows[("digits", "v2", "onnx 1.23.2, onnxruntime 1.33.0")]
    assert v1.state == "pass" and v1.verdicts["latency_ms.p90"].verdict == "pass"
    assert v2.state == "fail" and v2.verdicts["latency_ms.p90"].value == 8.0, "the newest verdict for v2"
    assert rows[("digits", "v2", ort_32)].verdicts["latency_ms.p90"].value == 9.0
    assert v2.latest == history["ort"][:10]
    assert {r.settings["quantization"] for r in summary} == {"none"}
    assert v1.model.startswith("v1@" + sha("model-v1")[:12])


def test_failing_since_is_the_first_commit_of_the_current_streak(
    git_repo: Path, history: dict[str, str]
) -> None:
    streaks = {s.spec: s for s in run(git_repo, [], Filters()).streaks()}
    digits = streaks["digits"]
    assert digits.state == "fail" and digits.length == 2
    assert digits.since is not None and digits.since.commit == history["v2"]
    assert streaks["other"].since is None
    write_lock(git_repo, lock(version="v3", model_file="model-v3", latency=2.0))
    commit(git_repo, "digits v3 fixed", "2026-01-15T10:00:00+00:00")
    assert {s.spec: s.since for s in run(git_repo, [], Filters()).streaks()}["digits"] is None


def test_uncommitted_lock_changes_are_the_working_tree_entry(git_repo: Path, history: dict[str, str]) -> None:
    write_lock(git_repo, lock(version="v3", model_file="model-v3", latency=2.0))
    audit = run(git_repo, [], Filters(spec="digits"))
    assert audit.entries[0].source == "working tree" and audit.entries[0].label == "working tree"
    assert audit.entries[0].lock_file == "specs/digits.lock.json"
    assert audit.streaks()[0].since is None, "the working tree passes again"


def test_filters(git_repo: Path, history: dict[str, str]) -> None:
    def specs_and_versions(filters: Filters) -> list[tuple[str, str | None]]:
        return [(e.spec, e.model_version) for e in run(git_repo, [], filters).entries]

    assert specs_and_versions(Filters(target="rk3588")) == [("other", "o1")]
    assert specs_and_versions(Filters(model=sha("model-v1")[:8])) == [("digits", "v1")]
    assert specs_and_versions(Filters(model=sha("imported model-v2")[:12])) == [("digits", "v2")] * 2
    assert specs_and_versions(Filters(model="V2")) == [("digits", "v2")] * 2, "version labels match too"
    assert specs_and_versions(Filters(model="abc")) == [], "a digest prefix needs 4+ characters"
    window = Filters(since=parse_date("2026-01-12"), until=parse_date("2026-01-13", end=True))
    assert [e.commit for e in run(git_repo, [], window).entries] == [history["ort"], history["v2"]]
    assert [e.spec for e in run(git_repo, [git_repo / "specs" / "other.yaml"], Filters()).entries] == [
        "other"
    ]


def test_a_merge_lists_the_branch_commit_once(git_repo: Path, history: dict[str, str]) -> None:
    git(git_repo, "checkout", "-q", "-b", "feature")
    write_lock(git_repo, lock(version="v4", model_file="model-v4", latency=1.5))
    feature = commit(git_repo, "digits v4 on a branch", "2026-01-16T10:00:00+00:00")
    git(git_repo, "checkout", "-q", "main")
    (git_repo / "NOTES").write_text("x\n")
    commit(git_repo, "unrelated on main", "2026-01-16T11:00:00+00:00")
    git(git_repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    entries = [e for e in run(git_repo, [], Filters(spec="digits")).entries]
    assert [e.commit for e in entries if e.model_version == "v4"] == [feature]


def test_bad_dates_are_errors() -> None:
    with pytest.raises(AuditError, match="not a date"):
        parse_date("last tuesday")
    assert parse_date("2026-01-12", end=True).hour == 23
