"""npuctl explain SPEC --profile on a real apply: the evaluate stage's profile, as text and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import onnx

from tests.conftest import ROOT


def test_explain_profile_shows_the_layers_of_the_deployed_model(digits_repo: Path, npuctl) -> None:
    done = npuctl(digits_repo, "apply", "specs/digits.yaml")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shown = npuctl(digits_repo, "explain", "specs/digits.yaml", "--profile", "--json")
    assert shown.returncode == 0, shown.stderr
    payload = json.loads(shown.stdout)
    jsonschema.validate(payload, json.loads((ROOT / "schemas" / "explain-profile.schema.json").read_text()))
    profile = payload["profiles"]["default"]
    billed = {name for layer in profile["layers"] for name in layer["onnx_nodes"]}
    model = onnx.load(str(digits_repo / "models" / "digits.onnx"))
    assert {n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm")} <= billed
    assert profile["attribution"]["utilisation_note"].startswith("estimated")
    assert isinstance(profile["suggestions"], list)
    text = npuctl(digits_repo, "explain", "specs/digits.yaml", "--profile")
    assert text.returncode == 0
    assert (
        "[default]" in text.stdout and "/conv1/Conv" in text.stdout and "separate iterations" in text.stdout
    )


def test_explain_profile_without_a_build_says_why(digits_repo: Path, npuctl) -> None:
    shown = npuctl(digits_repo, "explain", "specs/digits.yaml", "--profile")
    assert shown.returncode == 0
    assert "no profile" in shown.stdout
    payload = json.loads(npuctl(digits_repo, "explain", "specs/digits.yaml", "--profile", "--json").stdout)
    jsonschema.validate(payload, json.loads((ROOT / "schemas" / "explain-profile.schema.json").read_text()))
