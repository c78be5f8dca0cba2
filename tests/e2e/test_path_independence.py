"""Builds do not depend on where the repository is: the same specs built in two repositories at paths
of different depth and length give the same stage keys and byte-identical artifacts (equal sha256
digests) for every stage but evaluate's measurements: check, rewrite and preprocess, ONNX Runtime's
quantization and compile, rknn-toolkit2 (which embeds its working folder's path: it works in a
fixed-length /tmp folder) and the onnx2tf + vela TFLite path (which converts in a temporary folder).
The float CPU chain is checked across two paths by the kill -9 test's clean builds. OpenVINO + NNCF
(intel-npu) gave identical digests across two paths too when tried by hand; it is left out here to
keep the suite's time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.sdk import toolchains
from tests.conftest import copy_digits, git, run_npuctl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        toolchains.python(toolchains.RKNN) is None or toolchains.python(toolchains.TFLITE) is None,
        reason="needs `npuctl toolchain install rknn tflite` (.ci/setup)",
    ),
]

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/digits.onnx}}
  target: {target}
  inputs: {{image: [1, 1, 8, 8]}}
  quantization:
    mode: ptq
    weights: int8
    activations: {activations}
    calibration: {{data: ../data/calib, samples: 8, method: minmax}}
  evaluate: {{data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 1, runs: 2}}
"""
TARGETS = {
    "cpu-uint8": ("cpu", "uint8"),
    "rk3588": ("rk3588", "int8"),
    "ethos-u55": ("ethos-u55", "int8"),
}


def _build(repo: Path) -> dict[str, dict[str, Any]]:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=4, calib_samples=8)
    for name, (target, activations) in TARGETS.items():
        text = SPEC.format(name=name, target=target, activations=activations)
        (repo / "specs" / f"{name}.yaml").write_text(text)
    done = run_npuctl(repo, "apply", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {
        name: json.loads((repo / "specs" / f"{name}.lock.json").read_text())["variants"]["default"]["stages"]
        for name in TARGETS
    }


def _built(stages: dict[str, Any]) -> dict[str, tuple[str, dict[str, str] | None]]:
    """stage -> (key, artifact name -> digest); evaluate's artifacts are measurements (they vary)."""
    return {
        name: (
            stage["key"],
            None if name == "evaluate" else {a: v["digest"] for a, v in stage["artifacts"].items()},
        )
        for name, stage in stages.items()
    }


def test_the_same_specs_in_two_places_build_byte_identical_artifacts(tmp_path: Path) -> None:
    here = _build(tmp_path / "a" / "repo")
    there = _build(tmp_path / "a-much-longer-folder-name" / "one" / "two" / "elsewhere")
    for name in TARGETS:
        assert set(here[name]) >= {"import", "quantize", "compile", "evaluate"}, here[name]
        ours, theirs = _built(here[name]), _built(there[name])
        differ = {stage for stage in ours if ours[stage] != theirs.get(stage)}
        assert not differ, (name, {s: (ours[s], theirs.get(s)) for s in differ})
