"""The field-level spec diff (after extends merging) and the SLO old/new/delta table."""

from __future__ import annotations

from pathlib import Path

from reconciler.gitops import slo, specdiff
from reconciler.spec import load
from reconciler.state.lockread import LockView

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: d, labels: {{team: {team}}}}}
spec:
  model: {{path: ../models/digits.onnx, version: {version}}}
  target: cpu
  inputs: {{image: [1, 1, 8, 8]}}
  quantization: {{mode: {mode}}}
  slo: {{latency_ms: {{p90: {p90}}}}}
"""


def _spec(repo: Path, name: str, **values: object) -> Path:
    fields = {"team": "a", "version": "v1", "mode": "none", "p90": 5, **values}
    path = repo / "specs" / name
    path.write_text(SPEC.format(**fields))
    return path


def test_diff_lists_changed_leaves_with_the_stages_reading_them(digits_repo: Path) -> None:
    old = load(_spec(digits_repo, "old.yaml"), digits_repo)
    new = load(_spec(digits_repo, "new.yaml", team="b", version="v2", mode="fp16", p90=4), digits_repo)
    changes = {c.path: c for c in specdiff.diff(old, new)}
    assert set(changes) == {
        "metadata.labels.team",
        "spec.model.version",
        "spec.quantization.mode",
        "spec.slo.latency_ms.p90",
    }
    assert changes["spec.quantization.mode"].old == "none" and changes["spec.quantization.mode"].new == "fp16"
    assert changes["spec.quantization.mode"].stages == ("check", "quantize", "compile")
    assert changes["spec.slo.latency_ms.p90"].stages == ("verify",)
    assert changes["metadata.labels.team"].stages == ()
    assert changes["spec.model.version"].stages == (), "a version label rebuilds nothing"
    assert specdiff.diff(old, old) == []


def test_moving_a_setting_into_a_base_is_not_a_change(digits_repo: Path) -> None:
    flat = load(_spec(digits_repo, "flat.yaml"), digits_repo)
    (digits_repo / "specs" / "base.yaml").write_text(
        "apiVersion: npuctl/v1\nkind: DeploymentBase\nspec:\n  quantization: {mode: none}\n"
        "  model: {path: ../models/digits.onnx, version: v1}\n"
    )
    child = digits_repo / "specs" / "child.yaml"
    child.write_text(
        "apiVersion: npuctl/v1\nkind: Deployment\nextends: base.yaml\nmetadata: {name: d, labels: {team: a}}\n"
        "spec:\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  slo: {latency_ms: {p90: 5}}\n"
    )
    assert specdiff.diff(flat, load(child, digits_repo)) == []


def test_file_changes_name_the_stage_reading_each_file() -> None:
    changes = specdiff.file_changes({"model": "a", "eval_data": "x"}, {"model": "b", "eval_data": "x"})
    assert [(c.path, c.stages) for c in changes] == [("files.model", ("import",))]
    assert specdiff.file_changes(None, {"model": "b"}) == []


def _lock(**verdicts: tuple[float | None, float, str, str]) -> LockView:
    rows = [
        {
            "name": n,
            "variant": "default",
            "threshold": t,
            "comparison": c,
            "value": v,
            "passed": verdict == "pass",
            "evidence": "measured:host",
            "verdict": verdict,
            "detail": "",
        }
        for n, (v, t, c, verdict) in verdicts.items()
    ]
    return LockView.from_json({"variants": {"default": {"verdicts": rows}}})


def test_slo_table_has_old_new_delta_and_direction() -> None:
    old = _lock(
        latency=(2.0, 5, "<=", "pass"), accuracy=(0.97, 0.9, ">=", "pass"), dropped=(1.0, 2, "<=", "pass")
    )
    new = _lock(
        latency=(1.5, 4, "<=", "pass"), accuracy=(0.85, 0.9, ">=", "fail"), added=(3.0, 2, "<=", "fail")
    )
    rows = {r.name: r for r in slo.table(old, new)}
    assert (
        rows["latency"].delta == -0.5 and rows["latency"].relative == -0.25 and rows["latency"].better is True
    )
    assert rows["latency"].threshold == 4 and rows["latency"].old_threshold == 5
    assert rows["accuracy"].better is False and rows["accuracy"].new_verdict == "fail"
    assert rows["dropped"].new is None and rows["dropped"].new_verdict is None
    assert rows["added"].old is None and rows["added"].delta is None
    assert slo.summary(old) == (3, 3, 0) and slo.summary(new) == (1, 3, 2)
