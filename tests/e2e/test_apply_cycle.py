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
    assert (spec["status"], spec["sync"], spec["health"]) == ("Healthy", "Synced", "Healthy")
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


STARVED = "  quantization:\n    mode: ptq\n    calibration: {data: ../data/calib, samples: 100}\n  slo:"


def test_one_broken_spec_never_stops_the_others(digits_repo: Path, npuctl) -> None:
    (digits_repo / "models" / "corrupt.onnx").write_bytes(b"this is not a protobuf")
    corrupt = DIGITS_SPEC.format(name="corrupt").replace("digits.onnx", "corrupt.onnx")
    (digits_repo / "specs" / "corrupt.yaml").write_text(corrupt)
    starved = DIGITS_SPEC.format(name="starved").replace("  slo:", STARVED)
    (digits_repo / "specs" / "starved.yaml").write_text(starved)
    invalid = DIGITS_SPEC.format(name="invalid").replace("runs: 5", "runs: 0")
    (digits_repo / "specs" / "invalid.yaml").write_text(invalid)
    done = npuctl(digits_repo, "apply", "--json")
    assert done.returncode == 1
    payload = json.loads(done.stdout)
    jsonschema.validate(payload, _schema("apply"))
    by_name = {s["name"]: s for s in payload["specs"]}
    assert by_name["digits"]["status"] == "Healthy"
    [corrupt_error] = by_name["corrupt"]["errors"]
    assert "corrupt.onnx" in corrupt_error and "spec.model.path" in corrupt_error
    assert "\n" not in corrupt_error
    assert any("spec.evaluate.runs" in e for e in by_name["invalid"]["errors"])
    starved_stages = {s["name"]: s for s in by_name["starved"]["stages"]}
    assert by_name["starved"]["status"] == "Stalled"
    quantize = starved_stages["quantize"]
    assert quantize["action"] == "failed"
    assert "40" in quantize["reason"] and "100" in quantize["reason"] and "\n" not in quantize["reason"]
    assert Path(quantize["log"]).is_file()
    assert all(starved_stages[s]["action"] in ("built", "cached") for s in ("import", "check", "preprocess"))
    assert all(starved_stages[s]["action"] == "skipped" for s in ("compile", "evaluate"))


def test_terminal_failure_is_not_retried_until_inputs_change(digits_repo: Path, npuctl) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("  slo:", STARVED))
    first = json.loads(npuctl(digits_repo, "apply", "--json").stdout)
    second = json.loads(npuctl(digits_repo, "apply", "--json").stdout)
    for payload in (first, second):
        assert payload["specs"][0]["status"] == "Stalled"
    reason = next(s["reason"] for s in second["specs"][0]["stages"] if s["name"] == "quantize")
    assert reason.startswith("stalled:")
    assert npuctl(digits_repo, "plan").returncode == 1
    spec.write_text(spec.read_text().replace("samples: 100", "samples: 40"))
    fixed = npuctl(digits_repo, "apply", "--json")
    assert fixed.returncode == 0, fixed.stdout
    from reconciler.state.db import Database

    ledger = Database(digits_repo / ".npuctl" / "state.db").ledger("digits")
    attempts = [e["action"] for e in ledger if e["stage"] == "quantize"]
    assert attempts == ["failed", "built"], "the stalled quantize was not attempted again"


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


def test_status_reports_synced_healthy_then_out_of_sync(applied: Path, npuctl) -> None:
    status = json.loads(npuctl(applied, "status", "--json").stdout)
    jsonschema.validate(status, _schema("status"))
    [row] = status["specs"]
    assert (row["sync"], row["health"], row["status"]) == ("Synced", "Healthy", "Healthy")
    assert row["slo_passed"] == row["slo_total"] == 2
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 8"))
    status = json.loads(npuctl(applied, "status", "--json").stdout)
    row = status["specs"][0]
    assert (row["sync"], row["health"], row["status"]) == ("OutOfSync", "Unknown", "OutOfSync")
    assert "evaluate" in status["specs"][0]["reason"]


def test_markdown_plan_for_pull_requests(applied: Path, npuctl) -> None:
    spec = applied / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("p90: 1000", "p90: 900"))
    done = npuctl(applied, "plan", "--format", "markdown")
    assert done.returncode == 2
    assert "| verify | default | rejudge |" in done.stdout
    assert "| latency_ms.p90 |" in done.stdout


def test_gc_keeps_lock_files_and_judged_artifacts(applied: Path, npuctl) -> None:
    import onnx

    from reconciler.engine.gc import referenced
    from reconciler.engine.workspace import Workspace

    first_lock = json.loads((applied / "specs" / "digits.lock.json").read_text())
    first_stages = first_lock["variants"]["default"]["stages"]
    old_import = first_stages["import"]["artifacts"]["model"]["digest"]
    old_compiled = {a["digest"] for a in first_stages["compile"]["artifacts"].values()}
    model_path = applied / "models" / "digits.onnx"
    model = onnx.load(str(model_path))
    model.doc_string = "retrained"  # a new model version: new bytes, same graph
    onnx.save(model, str(model_path))
    assert npuctl(applied, "apply").returncode == 0
    dry = json.loads(npuctl(applied, "gc", "--dry-run", "--json").stdout)
    assert old_import in dry["removed"], "the superseded import output is referenced by nothing"
    assert not old_compiled & set(dry["removed"]), "a recorded verdict judged the old compiled artifact"
    ws = Workspace.open(applied)
    before = set(ws.store.digests())
    ws.close()
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


def test_transient_failure_is_retried_with_backoff_then_reported(digits_repo: Path, npuctl) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("runs: 5", "runs: 5\n    timeout_s: 0.01"))
    done = npuctl(digits_repo, "apply", "--json", env={"NPUCTL_RETRIES": "2", "NPUCTL_RETRY_BASE_S": "0.01"})
    assert done.returncode == 1
    payload = json.loads(done.stdout)
    evaluate = next(s for s in payload["specs"][0]["stages"] if s["name"] == "evaluate")
    assert evaluate["action"] == "failed"
    assert "timed out" in evaluate["reason"] or "timeout" in evaluate["reason"]
    log = Path(evaluate["log"]).read_text()
    assert log.count("retrying") == 2, "two retries after the first attempt"
    assert payload["specs"][0]["status"] == "Failed", "transient: not stalled, retried on the next apply"
    spec.write_text(spec.read_text().replace("    timeout_s: 0.01\n", ""))
    assert npuctl(digits_repo, "apply").returncode == 0


def test_apply_shows_what_a_built_stage_did(digits_repo: Path, npuctl) -> None:
    """The quantize stage's summary (samples, cache, kept layers, the auto budget) is in apply's output."""
    spec = digits_repo / "specs" / "digits.yaml"
    quantization = (
        "  quantization:\n"
        "    mode: ptq\n"
        "    calibration: {data: ../data/calib, samples: 32}\n"
        "    sensitive_layers: {keep: fp32, auto: {max_accuracy_drop: 0.01, max_layers: 1}}\n"
    )
    spec.write_text(spec.read_text().replace("  evaluate:\n", quantization + "  evaluate:\n", 1))
    done = npuctl(digits_repo, "apply")
    assert done.returncode in (0, 3), done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("  quantize: "))
    from backends.sdk.host import int8_dot

    weights = "int8" if int8_dot() == "exact" else "uint8"  # the cpu target's rule for this host
    assert f"ptq w{weights}/auint8, 32 samples (calibrated now)" in line and "auto: " in line
    payload = json.loads(npuctl(digits_repo, "apply", "--json").stdout)
    assert "note" not in next(s for s in payload["specs"][0]["stages"] if s["name"] == "quantize")  # cached
