"""The npuctl command on a real git repository with the real digits model, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import DIGITS_SPEC, ROOT

SCHEMAS = ROOT / "schemas"


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def _actions(payload: dict, spec: str = "digits") -> dict[str, str]:
    entry = next(s for s in payload["specs"] if s["name"] == spec)
    return {s["name"]: s["action"] for s in entry["stages"]}


@pytest.fixture
def applied(digits_repo: Path, npuctl) -> Path:
    done = npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return digits_repo


def test_first_apply_builds_everything_and_output_matches_schema(digits_repo: Path, npuctl) -> None:
    assert npuctl(digits_repo, "plan").returncode == 2
    done = npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    jsonschema.validate(payload, _schema("apply"))
    assert set(_actions(payload).values()) == {"built"}
    spec = payload["specs"][0]
    assert spec["status"] == "Ready"
    verdicts = {v["name"]: v for v in spec["slo"]}
    assert verdicts["latency_ms.p90"]["evidence"].startswith("measured:host")
    assert verdicts["accuracy.min"]["passed"] is True
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    jsonschema.validate(lock, _schema("lock"))


def test_noop_apply_is_cached_and_leaves_lock_byte_identical(applied: Path, npuctl) -> None:
    lock = applied / "specs" / "digits.lock.json"
    before = lock.read_bytes()
    assert npuctl(applied, "plan").returncode == 0
    done = npuctl(applied, "apply", "--json")
    assert done.returncode == 0
    assert set(_actions(json.loads(done.stdout)).values()) == {"cached"}
    assert lock.read_bytes() == before


def test_metadata_change_rebuilds_nothing(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("team: tests", "team: renamed") + "# a comment\n")
    plan = npuctl(applied, "plan", "--json")
    assert plan.returncode == 0, plan.stdout
    assert set(_actions(json.loads(plan.stdout)).values()) == {"cached"}


def test_slo_change_only_rejudges(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("min: 0.5", "min: 0.9999"))
    plan = npuctl(applied, "plan", "--json")
    assert plan.returncode == 2
    payload = json.loads(plan.stdout)
    jsonschema.validate(payload, _schema("plan"))
    actions = _actions(payload)
    assert actions.pop("verify") == "rejudge"
    assert set(actions.values()) == {"cached"}
    reason = next(s["reason"] for s in payload["specs"][0]["stages"] if s["name"] == "verify")
    assert "spec.slo.accuracy.min: 0.5 -> 0.9999" in reason
    done = npuctl(applied, "apply", "--json")
    assert done.returncode == 3, "a failed SLO exits 3"
    applied_payload = json.loads(done.stdout)
    assert set(_actions(applied_payload).values()) == {"cached"}
    failed = [v for v in applied_payload["specs"][0]["slo"] if v["passed"] is False]
    assert [v["name"] for v in failed] == ["accuracy.min"]


def test_evaluate_field_change_rebuilds_only_evaluate(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 6"))
    plan = json.loads(npuctl(applied, "plan", "--json").stdout)
    evaluate = next(s for s in plan["specs"][0]["stages"] if s["name"] == "evaluate")
    assert evaluate["action"] == "build"
    assert "spec.evaluate: " in evaluate["reason"] or "evaluate" in evaluate["reason"]
    done = json.loads(npuctl(applied, "apply", "--json").stdout)
    actions = _actions(done)
    assert actions.pop("evaluate") == "built"
    assert set(actions.values()) == {"cached"}


def test_one_broken_spec_never_stops_the_others(digits_repo: Path, npuctl) -> None:
    (digits_repo / "models" / "corrupt.onnx").write_bytes(b"this is not a protobuf")
    broken = DIGITS_SPEC.format(name="broken").replace("digits.onnx", "corrupt.onnx")
    (digits_repo / "specs" / "broken.yaml").write_text(broken)
    (digits_repo / "specs" / "invalid.yaml").write_text(
        DIGITS_SPEC.format(name="invalid").replace("runs: 5", "runs: 0")
    )
    done = npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 1
    payload = json.loads(done.stdout)
    by_name = {s["name"]: s for s in payload["specs"]}
    assert by_name["digits"]["status"] == "Ready"
    assert by_name["broken"]["status"] == "Stalled"
    broken_stages = {s["name"]: s for s in by_name["broken"]["stages"]}
    assert broken_stages["import"]["action"] == "failed"
    assert "\n" not in broken_stages["import"]["reason"]
    assert Path(broken_stages["import"]["log"]).is_file()
    assert all(broken_stages[s]["action"] == "skipped" for s in ("check", "compile", "evaluate"))
    assert any("spec.evaluate.runs" in e for e in by_name["invalid"]["errors"])


def test_terminal_failure_is_not_retried_until_inputs_change(digits_repo: Path, npuctl) -> None:
    model = digits_repo / "models" / "digits.onnx"
    good = model.read_bytes()
    model.write_bytes(b"corrupt")
    first = json.loads(npuctl(digits_repo, "apply", "--json").stdout)
    second = json.loads(npuctl(digits_repo, "apply", "--json").stdout)
    for payload in (first, second):
        assert payload["specs"][0]["status"] == "Stalled"
    reason = next(s["reason"] for s in second["specs"][0]["stages"] if s["name"] == "import")
    assert reason.startswith("stalled:")
    plan = npuctl(digits_repo, "plan")
    assert plan.returncode == 1
    model.write_bytes(good)
    fixed = npuctl(digits_repo, "apply", "--json")
    assert fixed.returncode == 0, fixed.stdout
    from reconciler.state.db import Database

    ledger = Database(digits_repo / ".npuctl" / "state.db").ledger("digits")
    import_attempts = [e["action"] for e in ledger if e["stage"] == "import"]
    assert import_attempts == ["failed", "built"], "the stalled import was not attempted again"


def test_explain_names_the_changed_field(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 7"))
    done = npuctl(applied, "explain", "digits", "evaluate", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    [stage] = payload["stages"]
    assert stage["up_to_date"] is False
    changed = {row["path"]: (row["last"], row["now"]) for row in stage["inputs"] if row["now"] != row["last"]}
    assert changed == {"fields.evaluate.runs": (5, 7)}
    text = npuctl(applied, "explain", "digits", "evaluate").stdout
    assert "fields.evaluate.runs" in text


def test_status_reports_ready_then_reconciling(applied: Path, npuctl) -> None:
    status = json.loads(npuctl(applied, "status", "--json").stdout)
    [row] = status["specs"]
    assert row["status"] == "Ready" and row["slo_passed"] == row["slo_total"] == 2
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 8"))
    status = json.loads(npuctl(applied, "status", "--json").stdout)
    assert status["specs"][0]["status"] == "Reconciling"
    assert "evaluate" in status["specs"][0]["reason"]


def test_markdown_plan_for_pull_requests(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 900"))
    done = npuctl(applied, "plan", "--format", "markdown")
    assert done.returncode == 2
    assert "| verify | default | rejudge |" in done.stdout
    assert "| latency_ms.p90 |" in done.stdout


def test_gc_keeps_what_lock_files_refer_to(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("  slo:", "  compile: {optimization_level: 1}\n  slo:"))
    assert npuctl(applied, "apply").returncode == 0
    from reconciler.engine.gc import referenced
    from reconciler.engine.workspace import Workspace

    dry = json.loads(npuctl(applied, "gc", "--dry-run", "--json").stdout)
    ws = Workspace.open(applied)
    before = set(ws.store.digests())
    ws.close()
    assert dry["removed"], "the first compiled artifact is no longer referenced"
    done = json.loads(npuctl(applied, "gc", "--json").stdout)
    assert done["removed"] == dry["removed"]
    ws = Workspace.open(applied)
    try:
        after = set(ws.store.digests())
        assert after == before - set(dry["removed"])
        assert referenced(ws) <= after
        assert ws.store.verify() == []
    finally:
        ws.close()
    assert npuctl(applied, "plan").returncode == 0
