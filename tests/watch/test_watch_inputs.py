"""What a spec makes the watcher watch, and which specs a changed path affects."""

from __future__ import annotations

from pathlib import Path

from reconciler.spec import load
from reconciler.watch.inputs import InputIndex, spec_inputs

BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
spec:
  model: {path: ../models/digits.onnx, version: v1}
  inputs: {image: [1, 1, 8, 8]}
  evaluate: {data: ../data/eval, labels: ../data/eval/labels.txt, warmup: 1, runs: 5}
"""
CHILD = """\
apiVersion: npuctl/v1
kind: Deployment
extends: bases/digits.base.yaml
metadata: {name: child}
spec:
  target: cpu
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 10}
"""


def _repo(digits_repo: Path) -> Path:
    (digits_repo / "specs" / "bases").mkdir()
    (digits_repo / "specs" / "bases" / "digits.base.yaml").write_text(BASE.replace("../", "../../"))
    (digits_repo / "specs" / "child.yaml").write_text(CHILD)
    return digits_repo


def test_inputs_cover_spec_base_model_and_data(digits_repo: Path) -> None:
    repo = _repo(digits_repo).resolve()
    inputs = spec_inputs(load(repo / "specs" / "child.yaml", repo), repo)
    assert inputs.files == {
        repo / "specs" / "child.yaml",
        repo / "specs" / "bases" / "digits.base.yaml",
        repo / "models" / "digits.onnx",
        repo / "data" / "eval" / "labels.txt",
    }
    assert inputs.trees == {repo / "data" / "eval", repo / "data" / "calib"}


def test_affected_maps_changes_to_specs(digits_repo: Path) -> None:
    repo = _repo(digits_repo).resolve()
    child = repo / "specs" / "child.yaml"
    plain = repo / "specs" / "digits.yaml"
    index = InputIndex(spec_dirs=frozenset({repo / "specs"}))
    index.put(child, spec_inputs(load(child, repo), repo))
    index.put(plain, spec_inputs(load(plain, repo), repo))
    assert index.affected({repo / "specs" / "bases" / "digits.base.yaml"}) == {child}
    assert index.affected({repo / "data" / "calib" / "sub" / "x.npy"}) == {child}
    assert index.affected({repo / "models" / "digits.onnx"}) == {child, plain}
    assert index.affected({repo / "specs" / "new.yaml"}) == {repo / "specs" / "new.yaml"}
    assert index.affected({repo / "specs" / "digits.lock.json", repo / "specs" / ".digits.yaml.swp"}) == set()
    assert index.affected({repo / "data" / "calibration-notes.txt"}) == set()
    folders = index.folders()
    assert folders[repo / "data" / "calib"] is True
    assert folders[repo / "specs" / "bases"] is False


def test_an_edit_to_the_charset_concerns_the_spec(digits_repo: Path) -> None:
    """The charset of a ctc task enters the evaluate key (and quantize's, for the auto search), so an
    edit to it must reach the specs that name it."""
    repo = digits_repo.resolve()
    (repo / "data" / "charset.txt").write_text("0\n1\n")
    spec_file = repo / "specs" / "digits.yaml"
    text = spec_file.read_text().replace(
        "    warmup: 1\n", "    task: {type: ctc, charset: ../data/charset.txt}\n    warmup: 1\n"
    )
    spec_file.write_text(text)
    index = InputIndex(spec_dirs=frozenset({repo / "specs"}))
    index.put(spec_file, spec_inputs(load(spec_file, repo), repo))
    assert repo / "data" / "charset.txt" in index.by_spec[spec_file].files
    assert index.affected({repo / "data" / "charset.txt"}) == {spec_file}
    assert index.folders()[repo / "data"] is False
