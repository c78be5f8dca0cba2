"""`npuctl plan --base REF` on real repositories: diff, stages, SLO deltas, formats, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.conftest import ROOT, git, run_npuctl
from tests.gitops.conftest import apply_ok, base_spec, commit_all, edit, npuctl_json, work_tree_state

PLAN_SCHEMA = json.loads((ROOT / "schemas" / "plan.schema.json").read_text())


def _pr(repo: Path) -> Path:
    """main: digits (applied, lock committed) + doomed; the PR edits digits, adds extra, removes doomed."""
    spec = repo / "specs" / "digits.yaml"
    (repo / "specs" / "doomed.yaml").write_text(spec.read_text().replace("name: digits", "name: doomed"))
    apply_ok(repo, "specs/digits.yaml")
    commit_all(repo, "main")
    edit(spec, "runs: 5", "runs: 6")
    edit(spec, "team: tests", "team: other")
    (repo / "specs" / "extra.yaml").write_text(spec.read_text().replace("name: digits", "name: extra"))
    (repo / "specs" / "doomed.yaml").unlink()
    return repo


def test_json_has_a_base_section_per_spec_and_matches_the_schema(digits_repo: Path) -> None:
    repo = _pr(digits_repo)
    before = work_tree_state(repo)
    payload = npuctl_json(repo, "plan", "--base", "HEAD", codes=(2,))
    assert work_tree_state(repo) == before, "reading the base touched neither work tree nor index"
    jsonschema.validate(payload, PLAN_SCHEMA)
    base = payload["base"]
    assert base["ref"] == "HEAD" and base["commit"] == git(repo, "rev-parse", "HEAD").strip()
    changes = {s["name"]: s["change"] for s in base["specs"]}
    assert changes == {"digits": "modified", "extra": "added", "doomed": "removed"}
    digits = base_spec(payload, "digits")
    fields = {f["path"]: f for f in digits["fields"]}
    assert set(fields) == {"spec.evaluate.runs", "metadata.labels.team"}
    assert (fields["spec.evaluate.runs"]["old"], fields["spec.evaluate.runs"]["new"]) == (5, 6)
    assert fields["spec.evaluate.runs"]["stages"] == ["evaluate"]
    assert digits["rebuild"] == ["evaluate", "verify"]
    assert digits["applied"] is False, "the lock still holds runs=5 results"
    assert {r["name"] for r in digits["slo"]} == {"latency_ms.p90", "accuracy.min"}
    assert all(r["new"] is None for r in digits["slo"])
    assert base_spec(payload, "doomed")["slo"] == []
    assert base_spec(payload, "extra")["rebuild"] == ["evaluate", "verify"], (
        "content keys: shared stages cached"
    )


def test_after_apply_the_slo_table_has_old_new_and_delta(digits_repo: Path) -> None:
    repo = _pr(digits_repo)
    old_lock = json.loads((repo / "specs" / "digits.lock.json").read_text())
    apply_ok(repo, "specs/digits.yaml")
    payload = npuctl_json(repo, "plan", "specs/digits.yaml", "--base", "HEAD", codes=(0,))
    digits = base_spec(payload, "digits")
    assert digits["applied"] is True and digits["rebuild"] == []
    new_lock = json.loads((repo / "specs" / "digits.lock.json").read_text())
    rows = {r["name"]: r for r in digits["slo"]}
    for verdict in new_lock["variants"]["default"]["verdicts"]:
        old = next(v for v in old_lock["variants"]["default"]["verdicts"] if v["name"] == verdict["name"])
        row = rows[verdict["name"]]
        assert (row["old"], row["new"]) == (old["value"], verdict["value"])
        assert row["delta"] == verdict["value"] - old["value"]
        assert row["new_verdict"] == verdict["verdict"] and row["evidence"] == verdict["evidence"]
    assert [s["name"] for s in payload["base"]["specs"]] == ["digits"], "PATH limits both sides"


def test_markdown_is_a_pr_comment_with_folded_long_diffs(digits_repo: Path) -> None:
    repo = _pr(digits_repo)
    spec = repo / "specs" / "digits.yaml"
    for i, field in enumerate(["warmup: 1"]):
        edit(spec, field, f"warmup: {i + 2}")
    extra_labels = ", ".join(f"l{i}: x" for i in range(10))
    edit(spec, "team: other", f"team: other, {extra_labels}")
    done = run_npuctl(repo, "plan", "--base", "HEAD", "--format", "markdown")
    assert done.returncode == 2, done.stderr
    text = done.stdout
    assert text.startswith("### npuctl plan against `HEAD`")
    assert "| `digits` | `cpu` | ✏️ modified | evaluate, verify |" in text
    assert "| `extra` | `cpu` | 🆕 added |" in text
    assert "🗑️ removed" in text
    assert "<details>" in text and "<summary>13 changed fields</summary>" in text
    assert "| `spec.evaluate.runs` | `5` | `6` | evaluate |" in text
    assert "| `metadata.labels.team` | `tests` | `other` | no stage (nothing rebuilds) |" in text
    assert "⏳ pending apply" in text


def test_a_fresh_clone_without_state_trusts_an_up_to_date_lock(digits_repo: Path, tmp_path: Path) -> None:
    repo = _pr(digits_repo)
    apply_ok(repo, "specs/digits.yaml")
    commit_all(repo, "pr: runs 6, lock applied")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    payload = npuctl_json(clone, "plan", "specs/digits.yaml", "--base", "HEAD~1", codes=(0,))
    digits = base_spec(payload, "digits")
    assert digits["applied"] is True, "sources digests in the lock match the spec and files"
    assert all(r["new"] is not None for r in digits["slo"])
    assert digits["rebuild"] == [], "no local state, but the lock records every stage key"
    edit(clone / "specs" / "digits.yaml", "runs: 6", "runs: 7")
    payload = npuctl_json(clone, "plan", "specs/digits.yaml", "--base", "HEAD~1", codes=(2,))
    assert base_spec(payload, "digits")["applied"] is False, "a spec edited after apply: lock is stale"
    (clone / "data" / "eval" / "labels.txt").write_text("")
    edit(clone / "specs" / "digits.yaml", "runs: 7", "runs: 6")
    payload = npuctl_json(clone, "plan", "specs/digits.yaml", "--base", "HEAD~1", codes=(1, 2))
    assert base_spec(payload, "digits")["applied"] is False, "an input file changed after apply"


def test_bad_ref_exits_1_with_one_line(digits_repo: Path) -> None:
    commit_all(digits_repo, "main")
    done = run_npuctl(digits_repo, "plan", "--base", "origin/main")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "npuctl plan --base: unknown git revision 'origin/main' (fetch it first, e.g. `git fetch origin main`)"
    ]


def test_a_spec_invalid_at_base_shows_the_base_error_with_the_ref(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    good = spec.read_text()
    spec.write_text(good.replace("runs: 5", "runs: 0"))
    commit_all(digits_repo, "broken")
    spec.write_text(good)
    payload = npuctl_json(digits_repo, "plan", "--base", "HEAD", codes=(2,))
    digits = base_spec(payload, "digits")
    assert digits["change"] == "modified"
    assert digits["base_errors"] and digits["base_errors"][0].startswith("HEAD:specs/digits.yaml:")
    text = run_npuctl(digits_repo, "plan", "--base", "HEAD").stdout
    assert "against HEAD" in text and "at base: HEAD:specs/digits.yaml:" in text
