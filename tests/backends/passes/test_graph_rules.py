"""The graph rules the import stage refuses a model on, and `validate` applies to the same model: an
opset the installed onnx does not know, an op of an unknown custom domain, nodes out of topological
order (a cycle). Each broken model is the real digits model with one edit."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import helper

from backends.passes.graph_rules import graph_problems
from backends.passes.importer import import_model
from backends.sdk.errors import TerminalError
from tests.conftest import DIGITS, DIGITS_SPEC, copy_digits, run_npuctl

REAL = onnx.load(str(DIGITS / "model.onnx"))


def _newer_opset(model: onnx.ModelProto) -> None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = onnx.defs.onnx_opset_version() + 1


def _custom_op(model: onnx.ModelProto) -> None:
    model.opset_import.append(helper.make_opsetid("com.acme", 1))
    model.graph.node[1].domain, model.graph.node[1].op_type = "com.acme", "Frob"


def _cycle(model: onnx.ModelProto) -> None:
    model.graph.node[0].input[0] = model.graph.node[-1].output[0]


BREAKS: dict[str, tuple[Callable[[onnx.ModelProto], None], str]] = {
    "opset": (_newer_opset, f"opset {onnx.defs.onnx_opset_version() + 1} is newer than the installed onnx"),
    "domain": (
        _custom_op,
        "is com.acme:Frob, an op of a custom domain no installed schema or op table knows",
    ),
    "cycle": (
        _cycle,
        "before any node produces it: the nodes are not in topological order (or form a cycle)",
    ),
}


def _broken(kind: str, folder: Path) -> Path:
    model = copy.deepcopy(REAL)
    BREAKS[kind][0](model)
    path = folder / f"{kind}.onnx"
    onnx.save(model, str(path))
    return path


def test_the_real_model_breaks_no_rule() -> None:
    assert graph_problems(REAL) == []


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_import_refuses_each_broken_graph_with_its_reason(kind: str, tmp_path: Path) -> None:
    path = _broken(kind, tmp_path)
    with pytest.raises(TerminalError) as refused:
        import_model(path, {"image": [1, 1, 8, 8]}, log=lambda *_: None)
    assert str(refused.value).startswith(f"{kind}.onnx: ") and BREAKS[kind][1] in str(refused.value)


def test_validate_refuses_what_import_refuses_naming_the_field(git_repo: Path) -> None:
    copy_digits(git_repo, eval_samples=2, calib_samples=2)
    for kind in BREAKS:
        _broken(kind, git_repo / "models")
        spec = DIGITS_SPEC.format(name=kind).replace("digits.onnx", f"{kind}.onnx")
        (git_repo / "specs" / f"{kind}.yaml").write_text(spec)
    done = run_npuctl(git_repo, "validate")
    assert done.returncode == 1, done.stdout + done.stderr
    for kind in BREAKS:
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith(f"specs/{kind}.yaml:"))
        assert line.startswith(f"specs/{kind}.yaml:7:17: spec.model.path: "), line
        assert BREAKS[kind][1] in line and "the import stage refuses it" in line, line


def test_the_opset_every_onnx_knows_is_the_newest_of_the_oldest_accepted_onnx() -> None:
    """A model at or under OPSET_EVERY_ONNX_KNOWS is not checked against the installed onnx (no import):
    that holds only while the oldest onnx pyproject accepts knows that opset (1.16: opset 21)."""
    import re

    import onnx
    import tomllib

    from backends.passes.graph_rules import OPSET_EVERY_ONNX_KNOWS

    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    (pin,) = [d for d in project["project"]["dependencies"] if re.match(r"onnx\b(?!runtime)", d)]
    assert pin == "onnx>=1.16"
    opset_of_onnx = {(1, 14): 19, (1, 15): 20, (1, 16): 21, (1, 17): 22, (1, 18): 23, (1, 19): 24}
    assert OPSET_EVERY_ONNX_KNOWS == opset_of_onnx[(1, 16)] <= onnx.defs.onnx_opset_version()


def test_validation_reads_a_model_without_importing_onnx(tmp_path: Path) -> None:
    """The summary validation needs (inputs, nodes, problems) is read with ONNX's message classes
    alone, so `npuctl validate` and a first `plan` do not pay onnx's import; a problem (nodes out of
    order) is still found."""
    import subprocess
    import sys

    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["r"], ["z"], name="a"), helper.make_node("Relu", ["x"], ["r"], name="b")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2])],
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    code = (
        "import sys; from pathlib import Path; from reconciler.spec._summary import summarize; "
        f"s = summarize(Path({str(model)!r})); "
        "print(sys.modules.get('onnx') is None, s.inputs[0].dims, [n for n, _ in s.nodes], len(s.problems))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "True (1, 'n') ['a', 'b'] 1", done.stdout + done.stderr
