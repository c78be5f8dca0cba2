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
