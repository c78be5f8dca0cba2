"""The cpu target's quantize stage (backends.onnxruntime._quantize): 8-bit weights this host's int8
kernels sum exactly, uint8 where u8 x s8 sums clip, and the host's kind in the key."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

from backends import registry
from backends.catalog import target
from backends.onnxruntime import OnnxRuntimeBackend, _quantize
from backends.onnxruntime._quantize import HostQuantizePass
from backends.passes import SHARED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from quant_helpers import digits_model, ptq_config, run_quantize


def _weight_types(model: Path) -> set[int]:
    graph = onnx.load(str(model)).graph
    inits = {t.name: t.data_type for t in graph.initializer}
    weights = {n.input[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits}
    return {inits[w] for w in weights if len(next(t for t in graph.initializer if t.name == w).dims) >= 2}


def test_the_cpu_target_quantizes_with_the_host_pass() -> None:
    impl = registry.implementation(target("cpu"), "quantize")
    assert isinstance(impl, HostQuantizePass)
    own, shared = OnnxRuntimeBackend.stages["quantize"], SHARED["quantize"]
    assert own.version.startswith(shared.version + "+")  # bumped with the shared pass
    assert impl.fingerprint()["host_int8_dot"] in ("exact", "saturating")


@pytest.mark.parametrize(
    ("kind", "dtype"), [("saturating", onnx.TensorProto.UINT8), ("exact", onnx.TensorProto.INT8)]
)
def test_weights_follow_the_hosts_int8_sums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, dtype: int
) -> None:
    monkeypatch.setattr(_quantize, "int8_dot", lambda: kind)
    out = run_quantize(ptq_config(16), digits_model(tmp_path), tmp_path / "w", stage=HostQuantizePass())
    assert _weight_types(out.artifacts["model"]) == {dtype}
    assert ("ptq wuint8/" in out.note) == (kind == "saturating")
    said = " ".join(out.report.get("notes", []))
    assert ("clip u8 x s8 sums" in said) == (kind == "saturating")


def test_a_spec_asking_other_weights_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_quantize, "int8_dot", lambda: "saturating")
    config = ptq_config(16, weights="int16", activations="uint16")
    policy = HostQuantizePass().policy(_request(config, tmp_path))
    assert policy.weights == "int16" and "weights uint8" not in " ".join(policy.notes)


def _request(config: dict[str, object], tmp_path: Path):  # type: ignore[no-untyped-def]
    from backends.sdk.base import StageRequest

    model = digits_model(tmp_path)
    return StageRequest(
        "quantize",
        target("cpu"),
        {"quantization": config, "target": "cpu"},
        {"model": model, "float_model": model},
        tmp_path,
        tmp_path / "quantize.log",
    )


def test_int8_activations_get_7_bit_weights_where_the_host_clips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_quantize, "int8_dot", lambda: "saturating")
    policy = HostQuantizePass().policy(_request(ptq_config(16, activations="int8"), tmp_path))
    assert policy.weights == "int8" and policy.reduce_range and any("reduce_range" in n for n in policy.notes)
    monkeypatch.setattr(_quantize, "int8_dot", lambda: "exact")
    exact = HostQuantizePass().policy(_request(ptq_config(16, activations="int8"), tmp_path))
    assert not exact.reduce_range and exact.notes == ()
