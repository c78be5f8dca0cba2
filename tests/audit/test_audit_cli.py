"""`npuctl audit` on real applies: the ledger, the working tree, and the three output formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.audit.conftest import commit
from tests.conftest import run_npuctl


def _audit(repo: Path, *args: str) -> dict:
    done = run_npuctl(repo, "audit", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_ledger_applies_match_commits_and_uncommitted_ones_are_listed(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    good = spec.read_text()
    assert run_npuctl(digits_repo, "apply").returncode == 0
    first = commit(digits_repo, "v1")
    payload = _audit(digits_repo)
    [entry] = payload["entries"]
    assert entry["commit"] == first and len(entry["applied_at"]) == 1, "the apply that produced the lock"
    assert entry["model"]["file_digest"] and entry["model"]["import_key"]

    spec.write_text(good.replace("min: 0.5", "min: 0.9999"))  # re-judged: accuracy fails now
    assert run_npuctl(digits_repo, "apply").returncode == 3
    payload = _audit(digits_repo)
    assert [e["source"] for e in payload["entries"]] == ["working tree", "commit"]
    assert payload["entries"][0]["state"] == "fail"
    assert payload["failing"][0]["since"]["label"] == "working tree"

    spec.write_text(good)  # back to the committed spec: the lock equals HEAD's again
    assert run_npuctl(digits_repo, "apply").returncode == 0
    payload = _audit(digits_repo)
    assert [e["source"] for e in payload["entries"]] == ["commit", "ledger"]
    local = payload["entries"][1]
    assert local["label"] == "local apply" and local["state"] == "fail"
    assert local["model"]["version"] == "v1", "version found through the import key"
    assert local["target"] == "cpu" and local["toolchains"]["compile"]["fingerprint"]
    assert len(payload["entries"][0]["applied_at"]) == 2
    assert payload["failing"] == [{"spec": "digits", "state": "pass", "since": None, "entries": 0}]

    markdown = run_npuctl(digits_repo, "audit", "--format", "markdown").stdout
    assert "#### Which model version meets which SLO" in markdown
    assert "| `digits` | `cpu` | `v1@" in markdown and "measured:host" in markdown
    assert "local apply" in markdown
    text = run_npuctl(digits_repo, "audit").stdout
    assert "which model version meets which SLO" in text and "passing at its newest entry" in text


def test_cli_errors_and_a_repo_without_history(digits_repo: Path) -> None:
    done = run_npuctl(digits_repo, "audit", "--since", "yesterday")
    assert done.returncode == 1 and "not a date" in done.stderr
    payload = _audit(digits_repo)
    assert payload["format_version"] == 1 and payload["entries"] == []
    assert (
        run_npuctl(digits_repo, "audit", "--format", "markdown")
        .stdout.strip()
        .endswith("No lock file history matches.")
    )
