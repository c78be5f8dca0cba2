"""The onnxruntime backend's declarations: name, targets, fingerprint, options schema, stages."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import jsonschema
import pytest

from backends.catalog import target
from backends.onnxruntime import OnnxRuntimeBackend, disabled_optimizers, validate_options
from backends.registry import backend, implementation
from backends.sdk.base import Backend, StageImpl
from backends.sdk.errors import TerminalError


def test_declarations() -> None:
    b = OnnxRuntimeBackend()
    assert isinstance(b, Backend) and b.name == "onnxruntime"
    assert target("cpu").backend == "onnxruntime"
    assert b.missing_toolchain() is None
    assert backend("onnxruntime").name == "onnxruntime"


def test_fingerprint_is_versions_from_metadata() -> None:
    fp = OnnxRuntimeBackend().fingerprint()
    for dist in ("onnxruntime", "onnx", "numpy", "flatbuffers"):
        assert fp[dist] == version(dist)
    assert fp["host_isa"]
    assert fp == OnnxRuntimeBackend().fingerprint()


def test_fingerprint_and_schema_do_not_import_the_runtime() -> None:
    code = (
        "import sys; from backends.onnxruntime import OnnxRuntimeBackend as B; b = B(); "
        "b.fingerprint(); b.options_schema(); b.missing_toolchain(); "
        "[r.identity() for r in b.stages.values()]; "
        "print([m for m in ('onnxruntime', 'onnx', 'numpy') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_stage_implementations() -> None:
    b = OnnxRuntimeBackend()
    for stage in ("compile", "evaluate"):
        impl = b.stages[stage].load()
        assert isinstance(impl, StageImpl) and impl.stage == stage
        assert impl.fingerprint() == b.fingerprint()
        assert implementation(target("cpu"), stage).stage == stage
    quantize = b.stages["quantize"].load()  # the shared pass with the host's weight rule
    assert quantize.stage == "quantize"
    assert implementation(target("cpu"), "quantize").stage == "quantize"
    assert sorted(b.stages) == ["compile", "evaluate", "quantize"]  # the others are the shared passes
    assert type(implementation(target("cpu"), "import")).__name__ == "ImportPass"


def test_options_schema() -> None:
    schema = OnnxRuntimeBackend().options_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    defaults = validate_options({})
    assert defaults == {
        "execution_mode": "sequential",
        "inter_op_num_threads": 0,
        "enable_mem_pattern": True,
        "enable_cpu_mem_arena": True,
    }
    assert validate_options({"execution_mode": "parallel"})["execution_mode"] == "parallel"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fast_math": True}, r"compile\.options\.fast_math: not an onnxruntime option"),
        ({"execution_mode": "fast"}, r"compile\.options\.execution_mode: 'fast' is not one of"),
        (
            {"inter_op_num_threads": -1},
            r"compile\.options\.inter_op_num_threads: -1 is less than the minimum",
        ),
        (
            {"enable_mem_pattern": "yes"},
            r"compile\.options\.enable_mem_pattern: 'yes' is not of type 'boolean'",
        ),
    ],
)
def test_invalid_options_name_the_option(options: dict[str, object], message: str) -> None:
    with pytest.raises(TerminalError, match=message):
        validate_options(options)


def test_fusion_switches_map_to_ort_optimizers() -> None:
    assert disabled_optimizers({"conv_bn": True, "conv_activation": True}) == []
    assert disabled_optimizers({"conv_bn": False}) == ["ConvAddFusion", "ConvBNFusion", "ConvMulFusion"]
    assert "ConvActivationFusion" in disabled_optimizers({"conv_activation": False})
    assert disabled_optimizers({"matmul_add": False}) == ["MatMulAddFusion"]
    assert disabled_optimizers({"constant_folding": False}) == ["ConstantFolding"]
    with pytest.raises(TerminalError, match=r"rewrite\.fusion\.gelu"):
        disabled_optimizers({"gelu": False})
