"""`npuctl init`: a commented starter spec from the model's real inputs, that validates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from reconciler.cli import cli
from reconciler.spec import check, load
from tests.spec.conftest import CLS, Repo, make_repo


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    made = make_repo(tmp_path / "repo")
    monkeypatch.chdir(made.root)
    yield made


def init(*args: str) -> Result:
    return CliRunner().invoke(cli, ["init", *args], standalone_mode=False, catch_exceptions=False)


def test_dynamic_model_gets_fixme_placeholders_and_validates(repo: Repo) -> None:
    result = init("models/cls.onnx", "--target", "rk3588")
    assert result.return_value == 0, result.output
    path = repo.root / "specs" / "cls-rk3588.yaml"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "# yaml-language-server: $schema=../schemas/deployment.schema.json"
    assert "    x:" in lines
    fixmes = [line for line in lines if "FIXME" in line]
    assert fixmes == ["      - 1  # FIXME: dynamic dim '?', pick a value"] * 3  # batch unnamed, H/W named '?'
    assert "      - 3" in lines
    assert "3 dynamic dimension(s) set to 1" in result.stdout
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    spec = load(path, repo.root)
    assert (spec.name, spec.target, spec.field("inputs.x")) == ("cls-rk3588", "rk3588", [1, 3, 1, 1])
    assert spec.field("model.path") == "../models/cls.onnx"
    assert (repo.root / ".gitignore").read_text() == ".npuctl/\n"


def test_named_dynamic_dims_are_named(repo: Repo) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["yes"], ["y"], name="r"),
            helper.make_node("Relu", ["input:0"], ["z"], name="s"),
        ],
        "g",
        [
            helper.make_tensor_value_info("yes", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("input:0", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
    )
    onnx.save(helper.make_model(graph), repo.root / "models" / "odd.onnx")
    result = init("models/odd.onnx", "-t", "cpu", "--name", "odd", "--output", "specs/odd.yaml")
    assert result.return_value == 0, result.output
    text = (repo.root / "specs" / "odd.yaml").read_text()
    assert "    \"yes\":\n      - 1  # FIXME: dynamic dim 'batch', pick a value\n      - 4\n" in text
    assert '    "input:0": [2, 3]\n' in text
    spec = load(repo.root / "specs" / "odd.yaml", repo.root)
    assert spec.deployment.spec.inputs == {"yes": [1, 4], "input:0": [2, 3]}


def test_static_model_has_no_fixme(repo: Repo) -> None:
    assert init("models/squeezenet.onnx", "--target", "cpu").return_value == 0
    text = (repo.root / "specs" / "squeezenet-cpu.yaml").read_text()
    assert "    data_0: [1, 3, 224, 224]\n" in text and "FIXME" not in text
    (report,) = check([repo.root / "specs" / "squeezenet-cpu.yaml"], repo.root)
    assert report.valid


def test_never_overwrites(repo: Repo) -> None:
    assert init("models/squeezenet.onnx", "--target", "cpu").return_value == 0
    path = repo.root / "specs" / "squeezenet-cpu.yaml"
    path.write_text("# mine\n")
    result = init("models/squeezenet.onnx", "--target", "cpu")
    assert result.return_value == 1
    assert "exists; not overwriting it" in result.stderr
    assert path.read_text() == "# mine\n"


def test_gitignore_entry_is_added_once(repo: Repo) -> None:
    (repo.root / ".gitignore").write_text("build/")  # no trailing newline
    assert init("models/squeezenet.onnx", "--target", "cpu").return_value == 0
    assert init("models/cls.onnx", "--target", "cpu").return_value == 0
    assert (repo.root / ".gitignore").read_text() == "build/\n.npuctl/\n"


def test_unknown_target_writes_nothing(repo: Repo) -> None:
    result = init("models/cls.onnx", "--target", "rk3589")
    assert result.return_value == 1
    assert "unknown target 'rk3589'; did you mean 'rk3588'" in result.stderr
    assert list((repo.root / "specs").iterdir()) == []


def test_model_shipped_in_a_package_is_referenced_through_it(repo: Repo) -> None:
    result = init(str(CLS), "--target", "cpu", "--name", "cls-pkg")
    assert result.return_value == 0, result.output
    spec = load(repo.root / "specs" / "cls-pkg.yaml", repo.root)
    assert spec.field("model.package") == "rapidocr_onnxruntime"
    assert spec.field("model.path") == "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"


def test_model_outside_the_repository_is_refused(repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes((repo.root / "models" / "squeezenet.onnx").read_bytes())
    result = init(str(outside), "--target", "cpu")
    assert result.return_value == 1
    assert "outside the repository" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["models/nothere.onnx", "--target", "cpu"], "model file not found"),
    (["models/squeezenet.onnx", "--target", "cpu", "--name", "Bad Name"], "invalid name 'Bad Name'"),
])  # fmt: skip
def test_bad_arguments(repo: Repo, args: list[str], message: str) -> None:
    result = init(*args)
    assert result.return_value == 1 and message in result.stderr


def test_the_commented_quantization_block_validates_once_uncommented(repo: Repo) -> None:
    """The ptq suggestion a user uncomments must be a valid spec as written (calibration, auto)."""
    assert init("models/squeezenet.onnx", "--target", "cpu").return_value == 0
    path = repo.root / "specs" / "squeezenet-cpu.yaml"
    text = path.read_text().replace(
        "    mode: none  # none | fp16 | ptq | qat\n    # mode: ptq\n", "    mode: ptq\n"
    )
    for line in ("calibration:", "sensitive_layers:", "  keep: fp16", "  auto: {"):
        assert f"    # {line}" in text, line
        text = text.replace(f"    # {line}", f"    {line}")
    path.write_text(text)
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    assert report.spec is not None
    assert report.spec.deployment.spec.quantization.sensitive_layers is not None


@pytest.mark.parametrize(
    ("model", "task"),
    [
        ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "task: {type: classification}"),
        ("ch_PP-OCRv4_rec_infer.onnx", "task: {type: ctc, blank: 0}"),
        ("ch_PP-OCRv4_det_infer.onnx", "task: {type: dense}"),
    ],
)
def test_the_guessed_task_is_written_commented_and_validates_once_uncommented(
    repo: Repo, model: str, task: str
) -> None:
    """init reads the outputs and suggests the most likely evaluate.task; the user confirms it."""
    assert init(str(CLS.parent / model), "--target", "cpu", "--name", "guess").return_value == 0
    path = repo.root / "specs" / "guess.yaml"
    text = path.read_text()
    line = next(ln for ln in text.splitlines() if "task: {" in ln)
    assert line.startswith(f"    # {task}  # CONFIRM: guessed because output "), line
    path.write_text(text.replace(f"    # {task}", f"    {task}"))
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    assert report.spec is not None and report.spec.deployment.spec.evaluate.task is not None
