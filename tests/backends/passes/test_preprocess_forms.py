"""Each toolchain's preprocessing convention, computed with its own formula, equals the canonical form."""

from __future__ import annotations

import numpy as np
import pytest
from npu_models import photo, resize_hwc

from backends.passes.preprocess import forms as F

CASES = [
    {"mean": [127.5, 127.5, 127.5], "std": [127.5, 127.5, 127.5], "color": {"from": "bgr", "to": "rgb"}},
    {
        "mean": [123.675, 116.28, 103.53],
        "std": [58.395, 57.12, 57.375],
        "color": {"from": "bgr", "to": "rgb"},
    },
    {"mean": [0.0, 10.5, 255.0], "std": [1.0, 2.0, 4.0], "color": {"from": "rgb", "to": "rgb"}},
    {"mean": [104.0, 117.0, 123.0], "std": [1.0, 1.0, 1.0], "color": {"from": "rgb", "to": "bgr"}},
]


def _image() -> np.ndarray:
    return resize_hwc(photo("astronaut"), 32, 48)


@pytest.mark.parametrize("case", CASES)
def test_rknn(case: dict[str, object]) -> None:
    form = F.canonical(case)
    raw = _image()
    assert np.max(np.abs(F.rknn_apply(F.rknn_form(form), raw) - F.canonical_apply(form, raw))) <= 1e-5


@pytest.mark.parametrize("case", CASES)
def test_cann_aipp(case: dict[str, object]) -> None:
    form = F.canonical(case)
    raw = _image()
    out = F.aipp_form(form, 32, 48)
    assert out["supported"]
    assert np.max(np.abs(F.aipp_apply(out, raw) - F.canonical_apply(form, raw))) <= 1e-5
    fields = out["aipp_op"]
    assert all(isinstance(fields[f"mean_chn_{c}"], int) for c in range(3))
    assert fields["var_reci_chn_0"] == pytest.approx(1 / form.std[0])
    assert out["config"].startswith("aipp_op {") and "var_reci_chn_2 :" in out["config"]


def test_cann_aipp_refuses_float_input() -> None:
    assert not F.aipp_form(F.canonical({"dtype": "float32", "mean": [0, 0, 0]}), 8, 8)["supported"]


@pytest.mark.parametrize("case", CASES)
def test_coreml(case: dict[str, object]) -> None:
    form = F.canonical(case)
    raw = _image()
    out = F.coreml_form(form)
    if len(set(form.std)) != 1:
        assert not out["supported"]
        return
    assert np.max(np.abs(F.coreml_apply(out, raw, form.color_from) - F.canonical_apply(form, raw))) <= 1e-5


@pytest.mark.parametrize("case", CASES)
def test_openvino(case: dict[str, object]) -> None:
    form = F.canonical(case)
    raw = _image()
    args = F.openvino_form(form)
    assert np.max(np.abs(F.openvino_apply(args, raw) - F.canonical_apply(form, raw))) <= 1e-5


@pytest.mark.parametrize("case", CASES[:2])
def test_openvino_real_prepostprocessor(case: dict[str, object]) -> None:
    """With OpenVINO installed, the real PrePostProcessor on an identity model gives the canonical input."""
    ov = pytest.importorskip("openvino")
    from openvino import opset13 as ops

    param = ops.parameter([1, 3, 32, 48], np.float32, name="x")
    model = ov.Model([ops.result(param)], [param])
    form = F.canonical(case)
    built = F.openvino_build(model, F.openvino_form(form))
    compiled = ov.Core().compile_model(built, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    raw = _image()
    got = compiled(raw[None])[0][0]
    assert np.max(np.abs(got - F.canonical_apply(form, raw))) <= 1e-4


def test_all_forms_reports_every_toolchain() -> None:
    forms = F.all_forms(F.canonical(CASES[0]), 48, 320, {"mode": "linear"})
    assert set(forms) == {"rknn", "cann_aipp", "coreml", "openvino"}
    assert forms["rknn"]["channel_swap_in_model"] is True
    assert forms["openvino"]["preprocess"]["resize"] == "RESIZE_LINEAR"
