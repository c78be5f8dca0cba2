"""`extends`: deep merge, chains, cycles, paths relative to the file that wrote them."""

from __future__ import annotations

import pytest

from reconciler.spec import SpecErrors, check, load, model_file, resolve_path
from tests.spec.conftest import Repo

BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
metadata:
  labels: {team: vision, tier: edge}
spec:
  model: {path: ../../models/squeezenet.onnx, version: v1}
  inputs:
    data_0: [1, 3, 224, 224]
  quantization:
    mode: ptq
    calibration: {data: ../../data/calib, samples: 8}
    sensitive_layers: {op_types: [Softmax], nodes: ["n1*"]}
  evaluate: {data: ../../data/eval, runs: 5}
"""


def child(extra: str = "", base: str = "bases/common.yaml") -> str:
    return f"""\
apiVersion: npuctl/v1
kind: Deployment
extends: {base}
metadata:
  name: sq-rk3588
  labels: {{tier: phone}}
spec:
  target: rk3588
{extra}"""


def test_deep_merge_child_wins(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", BASE)
    extra = "  quantization:\n    calibration: {samples: 16}\n    sensitive_layers: {op_types: [Relu]}\n"
    spec = load(repo.write("specs/a.yaml", child(extra)), repo.root)
    d = spec.deployment
    assert d.metadata.labels == {"team": "vision", "tier": "phone"}  # mappings merge
    assert d.spec.quantization.calibration is not None
    assert d.spec.quantization.calibration.samples == 16  # child wins
    assert d.spec.quantization.mode == "ptq"  # inherited
    assert d.spec.quantization.sensitive_layers is not None
    assert d.spec.quantization.sensitive_layers.op_types == ["Relu"]  # lists are replaced, not appended
    assert d.spec.quantization.sensitive_layers.nodes == ["n1*"]
    assert d.extends == "bases/common.yaml"
    assert spec.sources == (spec.path, (repo.root / "specs/bases/common.yaml").resolve())


def test_inherited_paths_are_rebased_to_the_child(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", BASE)
    spec = load(repo.write("specs/a.yaml", child()), repo.root)
    assert spec.field("model.path") == "../models/squeezenet.onnx"
    assert spec.field("quantization.calibration.data") == "../data/calib"
    assert spec.field("evaluate.data") == "../data/eval"
    assert model_file(spec, repo.root) == (repo.root / "models/squeezenet.onnx").resolve()
    # positions still point where the value was written
    assert spec.position("model.path") == ((repo.root / "specs/bases/common.yaml").resolve(), 6, 17)
    (report,) = check([spec.path], repo.root)
    assert report.valid, [str(e) for e in report.errors]


def test_child_paths_stay_as_written(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", BASE)
    spec = load(repo.write("specs/a.yaml", child("  model: {path: ../models/cls.onnx}\n")), repo.root)
    assert spec.field("model.path") == "../models/cls.onnx"
    assert spec.field("model.version") == "v1"


def test_package_relative_model_path_is_not_rebased(repo: Repo) -> None:
    base = BASE.replace(
        "model: {path: ../../models/squeezenet.onnx, version: v1}",
        "model: {package: onnx, path: backend/test/data/light/light_squeezenet.onnx}",
    )
    repo.write("specs/bases/common.yaml", base)
    spec = load(repo.write("specs/a.yaml", child()), repo.root)
    assert spec.field("model.path") == "backend/test/data/light/light_squeezenet.onnx"
    assert model_file(spec, repo.root).name == "light_squeezenet.onnx"


def test_null_drops_an_inherited_section(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", BASE)
    extra = "  quantization: {mode: none, calibration: null, sensitive_layers: null}\n"
    spec = load(repo.write("specs/a.yaml", child(extra)), repo.root)
    assert spec.field("quantization.calibration") is None
    assert spec.field("quantization.sensitive_layers") is None
    assert spec.field("evaluate.runs") == 5


def test_chain_of_three_and_errors_in_each_file(repo: Repo) -> None:
    repo.write("specs/bases/root.yaml", BASE)
    repo.write(
        "specs/bases/mid.yaml",
        "apiVersion: npuctl/v1\nkind: DeploymentBase\nextends: root.yaml\nspec:\n  compile: {cores: 0}\n",
    )
    path = repo.write("specs/a.yaml", child("  evaluate: {runs: -2}\n", base="bases/mid.yaml"))
    with pytest.raises(SpecErrors) as caught:
        load(path, repo.root)
    assert [str(e) for e in caught.value.errors] == [
        "specs/a.yaml:9:20: spec.evaluate.runs: must be > 0, got the integer -2",
        "specs/bases/mid.yaml:5:20: spec.compile.cores: must be > 0, got the integer 0",
    ]


def test_a_base_must_declare_itself(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", "kind: Something\nspec: {}\n")
    with pytest.raises(SpecErrors) as caught:
        load(repo.write("specs/a.yaml", child()), repo.root)
    assert [str(e) for e in caught.value.errors] == [
        "specs/bases/common.yaml:1:1: apiVersion: a base must set apiVersion: npuctl/v1",
        "specs/bases/common.yaml:1:7: kind: a base must set kind: Deployment or DeploymentBase",
    ]


def test_a_full_spec_can_be_a_base(repo: Repo) -> None:
    repo.write("specs/bases/common.yaml", BASE.replace("DeploymentBase", "Deployment"))
    spec = load(repo.write("specs/a.yaml", child()), repo.root)
    assert spec.deployment.kind == "Deployment" and spec.name == "sq-rk3588"


@pytest.mark.parametrize("value", ["[a.yaml]", "''", "/etc/hosts"])
def test_extends_must_be_a_relative_file_name(repo: Repo, value: str) -> None:
    with pytest.raises(SpecErrors, match=r"specs/a.yaml:3:10: extends: "):
        load(repo.write("specs/a.yaml", child(base=value)), repo.root)


def test_an_inherited_charset_resolves_against_the_base_file(repo: Repo) -> None:
    """evaluate.task.charset is a path like the others: written in a base in another folder, it is
    resolved against the base file's folder, not the child's."""
    repo.write("data/charset.txt", "a\nb\n")
    base = BASE.replace(
        "evaluate: {data: ../../data/eval, runs: 5}",
        "evaluate: {data: ../../data/eval, runs: 5, task: {type: ctc, charset: ../../data/charset.txt}}",
    )
    repo.write("specs/bases/common.yaml", base)
    spec = load(repo.write("specs/a.yaml", child()), repo.root)
    assert spec.field("evaluate.task.charset") == "../data/charset.txt"
    assert (
        resolve_path(spec, spec.field("evaluate.task.charset"), repo.root, "evaluate.task.charset")
        == (repo.root / "data/charset.txt").resolve()
    )
    assert spec.position("evaluate.task.charset")[0] == (repo.root / "specs/bases/common.yaml").resolve()
    (report,) = check([spec.path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
