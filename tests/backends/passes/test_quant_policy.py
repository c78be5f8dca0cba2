"""Quantization defaults are written once, on quant_policy's dataclasses (and CALIBRATION_SAMPLES): the
spec's models and the backends' reading of the section both take them from there; and one check says a
ptq run has no calibration folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.catalog import target
from backends.passes.quant.policy import CALIBRATION_SAMPLES, Policy, calibration_folder, resolve
from backends.sdk.errors import TerminalError
from reconciler.spec.models import AutoSensitive, Calibration, Quantization, SensitiveLayers
from tests.backends.defaults_scan import in_file

SPEC_SECTIONS = [m.__name__ for m in (Quantization, Calibration, SensitiveLayers, AutoSensitive)]


def test_no_quantization_default_is_restated_outside_the_dataclasses() -> None:
    assert in_file("reconciler/spec/models.py", SPEC_SECTIONS) == []
    assert in_file("backends/passes/quant/policy.py", ["resolve", "_rules"]) == []
    defined = {v for _, _, v in in_file("backends/passes/quant/policy.py", ["Policy", "AutoBudget"])}
    assert {"none", "int8", "minmax", 99.999, "target", 0.005, 8} <= defined, "the scan sees the definitions"


@pytest.mark.parametrize("target_id", ["cpu", "rk3588"])
def test_the_spec_and_the_backend_resolve_a_bare_section_alike(target_id: str) -> None:
    bare = {"mode": "ptq", "calibration": {"data": "calib"}, "sensitive_layers": {"auto": {}}}
    spec_json = Quantization.model_validate(bare).model_dump(mode="json")
    from_spec = resolve({"quantization": spec_json}, target(target_id))
    assert from_spec == resolve({"quantization": bare}, target(target_id))
    assert from_spec.samples == CALIBRATION_SAMPLES and from_spec.method == Policy.method
    assert from_spec.sensitive is not None and from_spec.sensitive.auto is not None


def test_no_calibration_section_calibrates_nothing() -> None:
    assert resolve({"quantization": {"mode": "fp16"}}, target("cpu")).samples == 0
    assert resolve({}, target("cpu")).mode == Quantization().mode == "none"


def test_a_ptq_run_without_its_calibration_folder_says_which_field(tmp_path: Path) -> None:
    assert calibration_folder({"calibration_data": tmp_path}) == tmp_path
    with pytest.raises(
        TerminalError, match=r"^quantization\.calibration\.data: ptq needs a calibration folder"
    ):
        calibration_folder({"model": tmp_path / "m.onnx"})
