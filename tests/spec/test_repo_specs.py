"""The repository's own specs are valid: schema, extends and semantic checks against the real models."""

from __future__ import annotations

from pathlib import Path

from reconciler.spec import check, discover, load_all

ROOT = Path(__file__).resolve().parents[2]


def test_repository_specs_load() -> None:
    specs, errors = load_all([ROOT / "specs"], ROOT)
    assert [str(e) for e in errors] == []
    assert specs, "no specs found in specs/"
    targets = {s.target for s in specs}
    assert "cpu" in targets and targets - {"cpu"}, "the examples include cpu and at least one NPU"


def test_repository_specs_pass_every_check() -> None:
    reports = check([ROOT / "specs"], ROOT)
    assert [str(e) for r in reports for e in r.errors] == []
    assert len(reports) == len(discover([ROOT / "specs"], ROOT))
