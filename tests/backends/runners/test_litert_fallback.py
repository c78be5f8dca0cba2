"""LiteRtSession where the XNNPACK delegate refuses a graph: the built-in kernels without it take over
(the real case, a hand-unrolled bidirectional LSTM's float TFLite, takes onnx2tf ten minutes to make:
docs/zoo.md). The interpreter here is a stand-in named so, recording the kernels it was asked for;
ai-edge-litert lives in the TFLite toolchain's own environment, not the test interpreter's."""

from __future__ import annotations

import enum
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from backends.runners.bench_runtimes import LiteRtSession


class _Kinds(enum.Enum):
    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


def _standin(refuse: str, asked: list[Any]) -> types.ModuleType:
    class StandInInterpreter:
        def __init__(
            self, model_path: str, num_threads: Any = None, experimental_op_resolver_type: Any = None
        ):
            self.kind = experimental_op_resolver_type
            asked.append(self.kind)

        def allocate_tensors(self) -> None:
            if self.kind is None:
                raise RuntimeError(refuse)

        def get_input_details(self) -> list[dict[str, Any]]:
            return [{"name": "x", "index": 0}]

        def get_output_details(self) -> list[dict[str, Any]]:
            return [{"name": "y", "index": 1}]

    module = types.ModuleType("ai_edge_litert.interpreter")
    module.Interpreter = StandInInterpreter  # type: ignore[attr-defined]
    module.OpResolverType = _Kinds  # type: ignore[attr-defined]
    return module


IO = {"inputs": [{"name": "x"}], "outputs": [{"name": "y", "onnx": "y"}]}


def test_an_xnnpack_refusal_falls_back_to_the_builtin_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    refusal = "failed to create XNNPACK runtimeNode number 746 (TfLiteXNNPackDelegate) failed to prepare."
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", _standin(refusal, asked))
    LiteRtSession(Path("m.tflite"), {"io": IO})
    assert asked == [None, _Kinds.BUILTIN_WITHOUT_DEFAULT_DELEGATES]


def test_any_other_refusal_is_raised_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", _standin("tensor 3 has no buffer", asked))
    with pytest.raises(RuntimeError, match="tensor 3 has no buffer"):
        LiteRtSession(Path("m.tflite"), {"io": IO})
    assert asked == [None]
