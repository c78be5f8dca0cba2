"""The suggestion rules that need no toolchain run, on profiles written here: each names its spec
field and a gain computed here from the layers and the catalog's figures, and the list is ranked."""

from __future__ import annotations

import pytest

from backends.catalog import target
from backends.profiles.suggest import MIN_GAIN_SHARE, suggest


def _layer(name: str, ms: float, **extra: object) -> dict:
    return {
        "name": name,
        "op_type": "Conv",
        "onnx_nodes": [name],
        "time_ms": ms,
        "macs": 0,
        "bytes": 0,
        **extra,
    }


def test_one_thread_of_several_is_offered_the_cores_with_amdahls_bound() -> None:
    layers = [_layer("conv", 0.6, macs=1000), _layer("reshape", 0.4)]
    found = suggest({"layers": layers}, target("cpu"), threads=1, cpus=2)
    assert [s["field"] for s in found] == ["compile.cores"] and found[0]["value"] == 2
    assert found[0]["expected_gain_ms"] == pytest.approx(0.6 * (1 - 1 / 2))
    assert found[0]["share"] == pytest.approx(0.3, abs=1e-4) and found[0]["evidence"].startswith("estimated")
    assert not suggest({"layers": layers}, target("cpu"), threads=2, cpus=2)


def test_float_layers_in_an_int8_model_are_priced_at_the_targets_peak_ratio() -> None:
    rk = target("rk3588")
    layers = [
        _layer("int8", 0.2, macs=10, precision="int8"),
        _layer("kept", 1.0, macs=10, precision="fp16"),
        _layer("cheap", 0.5, precision="fp16"),  # no MACs: not a compute layer
    ]
    found = [s for s in suggest({"layers": layers}, rk) if s["field"] == "quantization.sensitive_layers"]
    ratio = rk.peak_tops_fp16 / rk.peak_tops_int8
    assert ratio < 1 and found[0]["layers"] == ["kept"]
    assert found[0]["expected_gain_ms"] == pytest.approx(1.0 * (1 - ratio), abs=1e-6)


def test_preprocessing_on_the_cpu_is_priced_at_its_npu_roofline() -> None:
    rk = target("rk3588")
    moved = 3 * 224 * 224 * 4
    layers = [
        _layer("x/preprocess/scale", 0.8, bytes=moved, placement="CPU", device="CPU"),
        _layer("conv", 0.4, placement="NPU", device="NPU"),
    ]
    layers[0]["onnx_nodes"] = ["x/preprocess/scale"]
    found = [s for s in suggest({"layers": layers}, rk) if s["field"] == "preprocess"]
    on_npu = moved / (rk.bandwidth_gbps * 1e9) * 1e3  # no MACs: memory-bound
    assert found and found[0]["expected_gain_ms"] == pytest.approx(0.8 - on_npu, abs=1e-6)


def test_suggestions_are_ranked_by_gain_and_noise_is_dropped() -> None:
    rk = target("rk3588")

    def profile(pre_ms: float) -> dict:
        pre = _layer("x/preprocess/scale", pre_ms, bytes=1000, placement="CPU", device="CPU")
        kept = _layer("kept", 2.0, macs=10, precision="fp32")
        return {"layers": [pre, _layer("int8", 1.0, macs=10, precision="int8"), kept]}

    found = suggest(profile(0.5), rk)
    assert [s["field"] for s in found] == ["quantization.sensitive_layers", "preprocess"]
    assert found[0]["expected_gain_ms"] > found[1]["expected_gain_ms"]
    total = 0.05 + 1.0 + 2.0  # the preprocessing's gain below MIN_GAIN_SHARE of it: dropped
    assert MIN_GAIN_SHARE * total > 0.05
    assert [s["field"] for s in suggest(profile(0.05), rk)] == ["quantization.sensitive_layers"]
