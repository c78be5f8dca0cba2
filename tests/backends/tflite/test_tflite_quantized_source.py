"""A model that arrives quantized on the TFLite path: onnx2tf converts float models, so such a model
fails in one line naming what it carries, for every mode validate lets through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backends.tflite.needs import NEEDS_TFLITE
from tests.conftest import quantized_cls_spec, run_npuctl

pytestmark = NEEDS_TFLITE


@pytest.mark.parametrize("target", ["ethos-u55", "mediatek-mdla3"])
def test_a_q_dq_model_fails_saying_it_arrives_quantized(
    git_repo: Path, quantized_models: dict[str, Path], target: str
) -> None:
    quantized_cls_spec(git_repo, quantized_models["qdq"], "qdq", target)
    done = run_npuctl(git_repo, "apply", "--json", env={"NEUROPILOT_SDK_ROOT": ""})
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    failed = [s for s in json.loads(done.stdout)["specs"][0]["stages"] if s["action"] == "failed"]
    assert len(failed) == 1, failed
    reason = failed[0]["reason"]
    assert reason.startswith("the model arrives quantized (DequantizeLinear x"), reason
    assert f"give {target} the float model with quantization.mode: ptq" in reason
