"""A model that arrives dynamically quantized (ONNX Runtime's `quantize_dynamic`: DynamicQuantizeLinear
and ConvInteger, no Q/DQ pairs), built as it is (`mode: none`): its OpenVINO IR runs integer kernels
too, so the compile check judges it at the quantized tolerance. At the float one (what a source
without Q/DQ got before) the IR of PP-OCR's classifier was refused at 0.045 of a channel's range
against 0.001, while it picks the same class as the model on every sample."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.backends.passes.npu_models import photo, ppocr_input
from tests.conftest import quantized_cls_spec, run_npuctl

pytestmark = pytest.mark.slow


def test_a_dynamically_quantized_model_builds_for_the_intel_npu(
    git_repo: Path, quantized_models: dict[str, Path]
) -> None:
    frames = [ppocr_input(photo(p), 48, 192) for p in ("astronaut", "coffee", "chelsea", "rocket")]
    (git_repo / "data" / "eval").mkdir(parents=True)
    for k, x in enumerate(frames):
        np.save(git_repo / "data" / "eval" / f"{k}.npy", x)
    evaluate = "  evaluate: {data: ../data/eval, task: {type: classification}, warmup: 1, runs: 3}\n"
    quantized_cls_spec(git_repo, quantized_models["integer"], "int", "intel-npu", evaluate)
    done = run_npuctl(git_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stages = {s["name"]: s for s in json.loads(done.stdout)["specs"][0]["stages"]}
    assert stages["compile"]["action"] == "built", stages["compile"]
    with sqlite3.connect(git_repo / ".npuctl" / "state.db") as db:
        (report,) = [
            json.loads(r) for (r,) in db.execute("select report from records where stage = 'compile'")
        ]
    assert report["check"]["tolerance"] == 0.25 and report["check"]["agrees"], report["check"]
    out = git_repo / "out"
    assert run_npuctl(git_repo, "export", "specs/int.yaml", str(out)).returncode == 0
    import openvino as ov

    (xml,) = out.glob("*.xml")
    compiled = ov.Core().compile_model(str(xml), "CPU")
    source = ort.InferenceSession(str(quantized_models["integer"]))
    same = [
        int(np.argmax(compiled(x)[compiled.outputs[0]]) == np.argmax(source.run(None, {"x": x})[0]))
        for x in frames
    ]
    lock = json.loads((git_repo / "specs" / "int.lock.json").read_text())["variants"]["default"]
    recorded = lock["measurements"]["accuracy"]
    assert recorded["measure"] == "classification top1_agreement", recorded
    assert recorded["value"] == pytest.approx(sum(same) / len(same))
