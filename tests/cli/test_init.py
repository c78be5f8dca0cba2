"""`npuctl init`: a commented starter spec from the model's real inputs, that validates."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from reconciler.cli import cli
from reconciler.spec import check, load
from tests.spec.conftest import CLS, Repo, copy_quantized, make_repo


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    made = make_repo(tmp_path / "repo")
    monkeypatch.chdir(made.root)
    yield made


def init(*args: str) -> Result:
    return CliRunner().invoke(cli, ["init", *args], standalone_mode=False, catch_exceptions=False)


SLO_FIXMES = {"{p90: FIXME}": "{p90: 20}", "{max_drop: FIXME}": "{max_drop: 0.01}"}


def fill_slos(path: Path) -> None:
    """What a user does after init: put real budgets where the SLO placeholders are."""
    text = path.read_text()
    for placeholder, value in SLO_FIXMES.items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    path.write_text(text)


def test_unknown_dims_and_budgets_are_placeholders_that_fail_validate_at_their_lines(repo: Repo) -> None:
    """Never a guess that validates: a 1x3x1x1 classifier or `slo: {}` would pass silently."""
    result = init("models/cls.onnx", "--target", "rk3588")
    assert result.return_value == 0, result.output
    path = repo.root / "specs" / "cls-rk3588.yaml"
    lines = path.read_text().splitlines()
    assert lines[0] == "# yaml-language-server: $schema=../schemas/deployment.schema.json"
    assert "    x:" in lines and "      - 3" in lines
    dims = [line for line in lines if "FIXME: dynamic dim" in line]
    assert dims == ["      - 0  # FIXME: dynamic dim '?': its size (or rerun with --input x=...)"] * 3
    (report,) = check([path], repo.root)
    where = sorted((e.line, e.field) for e in report.errors)
    slo_lines = [i for i, line in enumerate(lines, 1) if ": FIXME}" in line]
    dim_lines = [i for i, line in enumerate(lines, 1) if "FIXME: dynamic dim" in line]
    assert [line for line, _ in where] == sorted(dim_lines + slo_lines), where
    [data_line] = [i for i, line in enumerate(lines, 1) if line.startswith("    data: ../data/eval  # FIXME")]
    assert f"specs/cls-rk3588.yaml:{data_line}: spec.evaluate.data" in result.stdout
    assert f"fill in {len(dim_lines + slo_lines) + 1} FIXME placeholder(s)" in result.stdout
    assert (repo.root / ".gitignore").read_text() == ".npuctl/\n"


def test_input_shapes_from_the_command_line(repo: Repo) -> None:
    result = init("models/cls.onnx", "--target", "rk3588", "--input", "x=1x3x48x192")
    assert result.return_value == 0, result.output
    path = repo.root / "specs" / "cls-rk3588.yaml"
    assert "    x: [1, 3, 48, 192]" in path.read_text() and "dynamic dim" not in path.read_text()
    fill_slos(path)
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    spec = load(path, repo.root)
    assert (spec.name, spec.target, spec.field("inputs.x")) == ("cls-rk3588", "rk3588", [1, 3, 48, 192])
    assert spec.field("model.path") == "../models/cls.onnx"
    for bad, message in (
        ("x=1x3x48", "x has rank 4 in the model, got 3 dims"),
        ("y=1x3x48x192", "the model has no input 'y'"),
        ("x=1x3xhx192", "the shape must be integers"),
    ):
        refused = init("models/cls.onnx", "--target", "rk3588", "--name", "other", "--input", bad)
        assert refused.return_value == 1 and message in refused.stderr, (bad, refused.stderr)
    assert not (repo.root / "specs" / "other.yaml").exists()
    # a size the model fixes otherwise re-declares it, said on the line (the import checks the graph)
    moved = init("models/cls.onnx", "--target", "rk3588", "--name", "other", "--input", "x=1x4x48x192")
    assert moved.return_value == 0, moved.output
    line = "    x: [1, 4, 48, 192]  # re-declares the model's [?, 3, ?, ?]: the import checks the graph at this shape"
    assert line in (repo.root / "specs" / "other.yaml").read_text()


def test_outside_a_repository_init_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = tmp_path / "bare"
    (bare / "specs").mkdir(parents=True)
    (bare / "m.onnx").write_bytes((CLS).read_bytes())
    monkeypatch.chdir(bare / "specs")
    result = init("../m.onnx", "--target", "cpu")
    assert result.return_value == 1 and "not inside a git repository" in result.stderr
    assert sorted(p.name for p in bare.rglob("*")) == ["m.onnx", "specs"], "no .npuctl, no spec, no cache"


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
    assert (
        "    \"yes\":\n      - 0  # FIXME: dynamic dim 'batch': its size (or rerun with --input yes=...)\n      - 4\n"
        in text
    )
    assert '    "input:0": [2, 3]\n' in text


def test_static_model_has_no_fixme(repo: Repo) -> None:
    assert init("models/squeezenet.onnx", "--target", "cpu").return_value == 0
    text = (repo.root / "specs" / "squeezenet-cpu.yaml").read_text()
    assert "    data_0: [1, 3, 224, 224]\n" in text and "dynamic dim" not in text
    fill_slos(repo.root / "specs" / "squeezenet-cpu.yaml")
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
    result = init(str(CLS), "--target", "cpu", "--name", "cls-pkg", "--input", "x=1x3x48x192")
    assert result.return_value == 0, result.output
    fill_slos(repo.root / "specs" / "cls-pkg.yaml")
    spec = load(repo.root / "specs" / "cls-pkg.yaml", repo.root)
    assert spec.field("model.package") == "rapidocr_onnxruntime", spec
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
    fill_slos(path)
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    assert report.spec is not None
    assert report.spec.deployment.spec.quantization.sensitive_layers is not None


@pytest.mark.parametrize(
    ("model", "mode"),
    [
        ("qdq", "    mode: qat  # the model arrives quantized (DequantizeLinear x"),
        (
            "integer",
            "    mode: none  # the model arrives quantized with integer operators (DynamicQuantizeLinear x",
        ),
    ],
)
def test_a_model_quantized_on_arrival_gets_the_mode_that_builds_it(
    repo: Repo, quantized_models: dict[str, Path], model: str, mode: str
) -> None:
    """A Q/DQ model (ONNX Runtime's static quantizer) is written as qat, never as a float model whose
    ptq suggestion would quantize it twice; one of integer operators as none, saying why."""
    copy_quantized(repo, quantized_models)
    assert init(f"models/{model}.onnx", "--target", "cpu", "--input", "x=1x3x48x192").return_value == 0
    path = repo.root / "specs" / f"{model}-cpu.yaml"
    text = path.read_text()
    assert mode in text and "# mode: ptq" not in text, text
    fill_slos(path)
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("apple-ane", "Core ML's conversion (through onnx2torch) reads no Q/DQ nodes"),
        ("ethos-u55", "onnx2tf converts float models only"),
        ("mediatek-mdla3", "onnx2tf converts float models only"),
    ],
)
def test_a_q_dq_model_for_a_toolchain_that_reads_no_q_dq_gets_a_fixme_saying_why(
    repo: Repo, quantized_models: dict[str, Path], target: str, why: str
) -> None:
    """qat there fails validate at the mode's line (the backend's own spec check), and so does the
    placeholder init writes instead, with the backend's reason beside it."""
    copy_quantized(repo, quantized_models)
    result = init("models/qdq.onnx", "--target", target, "--input", "x=1x3x48x192")
    path = repo.root / "specs" / f"qdq-{target}.yaml"
    lines = path.read_text().splitlines()
    (line,) = [i for i, text in enumerate(lines, 1) if text.startswith("    mode: ")]
    assert (
        lines[line - 1].startswith("    mode: FIXME  # FIXME: the model arrives quantized (")
        and why in lines[line - 1]
    )
    assert f"specs/qdq-{target}.yaml:{line}: spec.quantization.mode" in result.stdout
    fill_slos(path)
    path.write_text(path.read_text().replace("mode: FIXME", "mode: qat"))
    (report,) = check([path], repo.root)
    assert [(e.line, e.field) for e in report.errors] == [(line, "spec.quantization.mode")], report.errors
    assert why in str(report.errors[0])


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
    fill_slos(path)
    text = re.sub(r"- 0  # FIXME: dynamic dim .*", "- 32", path.read_text())
    line = next(ln for ln in text.splitlines() if "task: {" in ln)
    assert line.startswith(f"    # {task}  # CONFIRM: guessed because output "), line
    path.write_text(text.replace(f"    # {task}", f"    {task}"))
    (report,) = check([path], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    assert report.spec is not None and report.spec.deployment.spec.evaluate.task is not None


def test_a_target_whose_evaluate_needs_data_gets_a_placeholder_that_fails_validate_until_filled(
    repo: Repo,
) -> None:
    """rk3588's evaluate (runner local: the simulator) needs evaluate.data; cpu's falls back to random
    inputs. The placeholder is the backend's declared need, and validate fails at it until it names a
    folder of samples."""
    from reconciler.spec._needs import target_needs

    [need] = target_needs("rk3588")
    assert (need.field, need.when) == ("evaluate.data", ("evaluate.runner", ("local",)))
    assert target_needs("cpu") == ()
    shutil.rmtree(repo.root / "data" / "eval")
    assert init("models/cls.onnx", "--target", "rk3588", "--input", "x=1x3x48x192").return_value == 0
    assert init("models/cls.onnx", "--target", "cpu", "--input", "x=1x3x48x192").return_value == 0
    rk, cpu = (repo.root / "specs" / f"cls-{t}.yaml" for t in ("rk3588", "cpu"))
    lines = rk.read_text().splitlines()
    placeholder = f"    data: {need.placeholder}  # FIXME"
    [line] = [i for i, text in enumerate(lines, 1) if text.startswith(placeholder)]
    assert lines[line - 2] == "  evaluate:"
    assert "data:" not in cpu.read_text().split("  evaluate:")[1].split("  slo:")[0]
    fill_slos(rk)
    fill_slos(cpu)
    assert check([cpu], repo.root)[0].valid
    (report,) = check([rk], repo.root)
    assert [(e.line, e.field) for e in report.errors] == [(line, "spec.evaluate.data")], report.errors
    samples = repo.root / "data" / "eval"
    samples.mkdir()
    (samples / "0.npy").write_bytes(b"")
    assert check([rk], repo.root)[0].valid
