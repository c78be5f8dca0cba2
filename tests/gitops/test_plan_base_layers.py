"""`npuctl plan --base REF`: the per-layer profiles of the base's and the work tree's lock files, layer
by layer, on a real repository: a PR that quantizes the digits model to int8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.state.store import Store
from tests.conftest import run_npuctl
from tests.gitops.conftest import apply_ok, base_spec, commit_all, edit, npuctl_json

pytestmark = pytest.mark.slow  # real builds in every test: minutes of the fast tier

QUANT = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 16, method: minmax}
"""


def _profile(repo: Path, lock: dict) -> dict:
    entry = lock["variants"]["default"]["stages"]["evaluate"]["artifacts"]["profile"]
    return json.loads(Store(repo / ".npuctl" / "store").path(entry["digest"]).read_text())


def test_a_pr_that_quantizes_shows_each_layers_time_and_precision_base_to_now(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    apply_ok(digits_repo, "specs/digits.yaml")
    base_lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    commit_all(digits_repo, "main")
    edit(spec, "  evaluate:", QUANT + "  evaluate:")
    apply_ok(digits_repo, "specs/digits.yaml")
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    payload = npuctl_json(digits_repo, "plan", "specs/digits.yaml", "--base", "HEAD", codes=(0,))
    (variant,) = base_spec(payload, "digits")["layers"]
    old, new = _profile(digits_repo, base_lock), _profile(digits_repo, lock)
    assert variant["missing"] is None
    assert variant["base_total_ms"] == round(sum(x["time_ms"] for x in old["layers"]), 6)
    assert variant["now_total_ms"] == round(sum(x["time_ms"] for x in new["layers"]), 6)
    # the int8 convolutions pair with the float ones they replace, and say what changed
    precision = {
        c["layer"]: c["changed"]["precision"] for c in variant["changed"] if "precision" in c["changed"]
    }
    conv = next(name for name in precision if "/conv2/Conv" in name.split(", "))
    assert precision[conv] == {"base": "fp32", "now": "int8"}
    was = next(x for x in old["layers"] if "/conv2/Conv" in x["onnx_nodes"])
    now = next(x for x in new["layers"] if "/conv2/Conv" in x["onnx_nodes"])
    row = next(c for c in variant["changed"] if c["layer"] == conv)
    assert (row["base_ms"], row["now_ms"]) == (was["time_ms"], now["time_ms"])
    # "slower": grew by more than 10 % and by at least 1 % of the base total, computed here
    floor = 0.01 * variant["base_total_ms"]
    for c in variant["slower"]:
        assert c["delta_ms"] > floor and c["now_ms"] > 1.1 * c["base_ms"]
    markdown = run_npuctl(digits_repo, "plan", "specs/digits.yaml", "--base", "HEAD", "--format", "markdown")
    assert "**Layers** [default] (profile base → now)" in markdown.stdout
    assert "precision fp32 → int8" in markdown.stdout
    # a base profile this store does not hold (built elsewhere, not pulled) is reported missing, not guessed
    entry = base_lock["variants"]["default"]["stages"]["evaluate"]["artifacts"]["profile"]
    Store(digits_repo / ".npuctl" / "store").path(entry["digest"]).unlink()
    payload = npuctl_json(digits_repo, "plan", "specs/digits.yaml", "--base", "HEAD", codes=(0,))
    (variant,) = base_spec(payload, "digits")["layers"]
    assert variant["missing"].startswith(f"base's profile.json {entry['digest'][:12]} not in this store")
    assert variant["slower"] == [] and variant["changed"] == []
