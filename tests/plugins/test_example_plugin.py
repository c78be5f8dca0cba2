"""The worked plug-in example (tests/plugins/example_npu), installed into a real virtualenv: its backend,
its target and its op table appear in `npuctl backends` and `npuctl targets`, and a spec for its target
validates and applies through it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import nested_venv
from tests.conftest import ROOT, copy_digits, git

pytestmark = pytest.mark.slow  # real builds in every test: minutes of the fast tier

EXAMPLE = Path(__file__).parent / "example_npu"
SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: digits-example}
spec:
  model: {path: ../models/digits.onnx}
  target: example-n1
  inputs: {image: [1, 1, 8, 8]}
  evaluate: {data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 1, runs: 5}
  slo: {accuracy: {min: 0.5}}
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv importing this checkout, then the test interpreter's packages, and the plug-in
    installed by pip from a copy of its sources (pip builds in-tree)."""
    where = tmp_path_factory.mktemp("plugin")
    python = nested_venv.create(where / "venv", [ROOT])
    source = where / "example_npu"
    shutil.copytree(EXAMPLE, source)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(source)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def _npuctl(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05"}
    return subprocess.run(
        [str(python), "-m", "reconciler", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_plugin_backend_and_target_are_listed(venv: Path, tmp_path: Path) -> None:
    listed = json.loads(_npuctl(venv, tmp_path, "backends", "--json").stdout)
    row = next(b for b in listed["backends"] if b["name"] == "examplenpu")
    assert row["origin"] == "plug-in npuctl-example-npu 0.1.0"
    assert row["targets"] == ["example-n1"] and row["toolchain"] == "ready"
    assert "example plug-in" in row["evidence"]
    assert any(p.endswith("example_npu/catalog") for p in listed["catalog_plugins"])
    shown = _npuctl(venv, tmp_path, "targets", "example-n1", "--json")
    assert shown.returncode == 0, shown.stderr
    shown_target = json.loads(shown.stdout)["target"]
    assert shown_target["op_table"] == "example-n1" and shown_target["built_by"]["backend"] == "examplenpu"
    out = tmp_path / "team.schema.json"
    made = subprocess.run(
        [str(venv), "-m", "reconciler.spec.schema", "--plugins", "--output", str(out)], cwd=tmp_path
    )
    assert made.returncode == 0
    target = json.loads(out.read_text())["$defs"]["PartialDeploymentSpec"]["properties"]["target"]
    assert "example-n1" in target["enum"], "a team's own schema completes its plug-in targets"


def test_a_spec_for_the_plugin_target_applies_through_it(venv: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo, eval_samples=10, calib_samples=1)
    (repo / "specs" / "digits.yaml").write_text(SPEC)
    assert _npuctl(venv, repo, "validate").returncode == 0
    done = _npuctl(venv, repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout + done.stderr
    [spec] = json.loads(done.stdout)["specs"]
    assert {s["name"]: s["action"] for s in spec["stages"]}["compile"] == "built"
    lock = json.loads((repo / "specs" / "digits.lock.json").read_text())
    compile_impl = lock["variants"]["default"]["stages"]["compile"]["impl"]
    assert compile_impl["fingerprint"]["example-npu-sdk"] == "0.1.0", (
        "the plug-in's fingerprint is in the key"
    )
    coverage = lock["variants"]["default"]["measurements"]["npu_coverage"]
    assert 0 < coverage["value"] < 1, "the plug-in's op table puts Gemm and Flatten on the CPU"

    without = subprocess.run(
        [sys.executable, "-m", "reconciler", "validate"], cwd=repo, capture_output=True, text=True
    )
    assert without.returncode == 1 and "spec.target" in without.stdout, (
        "without the plug-in: a validate error"
    )
