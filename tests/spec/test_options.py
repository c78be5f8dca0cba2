"""`compile.backend` must name a registered backend; `compile.options` must match its JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest

from backends import registry
from reconciler.spec import check
from tests.spec.conftest import GOOD, Repo, edit

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "graph_optimization": {"enum": ["basic", "extended", "all"]},
        "intra_op_threads": {"type": "integer", "minimum": 1},
    },
}


class _SchemaOnly:
    """Stands in for a backend module that is not written yet: only its options schema is read."""

    def options_schema(self) -> dict[str, Any]:
        return SCHEMA


@pytest.fixture
def schema_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "backend", lambda name: _SchemaOnly())


def _errors(repo: Repo, compile_line: str) -> list[str]:
    text = edit(GOOD, {19: compile_line, 20: "  #", 21: "  #", 22: "  #"})
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    return [str(e) for e in report.errors]


def test_valid_options(repo: Repo, schema_backend: None) -> None:
    assert _errors(repo, "  compile: {options: {graph_optimization: all, intra_op_threads: 2}}") == []


def _col(line: str, token: str) -> int:
    return line.index(token) + 1


def test_options_are_checked_against_the_backend_schema(repo: Repo, schema_backend: None) -> None:
    line = "  compile: {options: {graph_optimisation: all, intra_op_threads: 0}}"
    assert _errors(repo, line) == [
        f"specs/a.yaml:19:{_col(line, 'graph_')}: spec.compile.options.graph_optimisation: "
        "unknown onnxruntime option 'graph_optimisation'; did you mean 'graph_optimization'?",
        f"specs/a.yaml:19:{_col(line, '0}')}: spec.compile.options.intra_op_threads: "
        "onnxruntime option: 0 is less than the minimum of 1",
    ]


def test_unknown_backend_override(repo: Repo) -> None:
    line = "  compile: {backend: onnxruntim}"
    assert _errors(repo, line) == [
        f"specs/a.yaml:19:{_col(line, 'onnx')}: spec.compile.backend: no backend named 'onnxruntim'; "
        "did you mean 'onnxruntime'?"
    ]


def test_unloadable_backend_is_reported(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BUILTIN, "broken", "backends.no_such_module:Nothing")
    registry.backend.cache_clear()
    line = "  compile: {backend: broken, options: {x: 1}}"
    errors = _errors(repo, line)
    assert len(errors) == 1, errors
    prefix = f"specs/a.yaml:19:{_col(line, 'options')}: spec.compile.options: cannot check the options"
    assert errors[0].startswith(prefix + " of backend 'broken'"), errors


@pytest.mark.parametrize("target", ["ethos-u55", "ethos-u85", "mediatek-mdla3"])
def test_a_float_keep_in_a_16_bit_tflite_is_a_validate_error(repo: Repo, target: str) -> None:
    """Float layers inside an int8 TFLite are built (LiteRT's selective quantization); inside a
    16-bit-activation one TF cannot build them: that fails at validate, at the sensitive_layers line,
    naming the field and the alternatives."""
    text = GOOD.replace("target: cpu", f"target: {target}")
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert [str(e) for e in report.errors] == [], "a float keep in an int8 TFLite is valid"
    wide = text.replace("    sensitive_layers:\n", "    activations: int16\n    sensitive_layers:\n")
    (report,) = check([repo.write("specs/a.yaml", wide)], repo.root)
    errors = [str(e) for e in report.errors]
    block = wide.splitlines().index("    sensitive_layers:") + 1
    assert len(errors) == 1, errors
    file, line, _ = errors[0].split(":", 3)[:3]
    assert file == "specs/a.yaml" and block <= int(line) <= block + 2, "inside the sensitive_layers block"
    assert "spec.quantization.sensitive_layers.keep:" in errors[0] and "keep: fp16 layers" in errors[0]
    assert "use activations: int8 or keep: int16" in errors[0] and target in errors[0]
    widened = wide.replace("    sensitive_layers:\n", "    sensitive_layers:\n      keep: int16\n")
    (report,) = check([repo.write("specs/a.yaml", widened)], repo.root)
    assert [str(e) for e in report.errors] == []
