"""A recurrent export through the TFLite path: arabic-name-romanizer's encoder (int64 ids, a boolean
padding mask, two bidirectional GRUs, and the mask itself returned as an output) for a MediaTek APU.

onnx2tf crashed on the GRUs (SIGSEGV while tracing); the converter forms unroll them over the spec's
fixed sequence, and the TFLite's mask output, which is its mask input's own tensor, is tied by its
output key (the input's key had overwritten it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.backends.tflite.needs import NEEDS_TFLITE
from tests.conftest import git, run_npuctl

pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

STEPS = 6
SPEC = f"""\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: enc}}
spec:
  model: {{path: ../models/encoder.onnx, version: v1}}
  target: mediatek-mdla3
  inputs: {{src: [1, {STEPS}], src_mask: [1, {STEPS}]}}
  quantization:
    mode: ptq
    calibration: {{data: ../data, samples: 4, method: minmax}}
  evaluate: {{data: ../data, warmup: 1, runs: 3}}
"""


def test_a_gru_encoder_builds_int8_for_mediatek(tmp_path: Path) -> None:
    from tests.backends.tasks.task_models import romanizer_encoder

    repo = tmp_path / "repo"
    for folder in ("models", "specs", "data"):
        (repo / folder).mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "models" / "encoder.onnx").write_bytes(romanizer_encoder().read_bytes())
    rng = np.random.default_rng(0)
    for k in range(4):
        length = int(rng.integers(3, STEPS + 1))
        src = np.zeros((1, STEPS), np.int64)  # 0 is the package's padding id
        src[0, :length] = rng.integers(4, 150, length)
        np.savez(repo / "data" / f"{k}.npz", src=src, src_mask=src == 0)
    (repo / "specs" / "enc.yaml").write_text(SPEC)
    done = run_npuctl(repo, "apply", "--json", timeout=1200)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    (spec,) = json.loads(done.stdout)["specs"]
    stages = {s["name"]: s for s in spec["stages"]}
    assert stages["quantize"]["action"] == "built", stages["quantize"]
    import sqlite3

    with sqlite3.connect(repo / ".npuctl" / "state.db") as db:
        (report,) = [
            json.loads(r) for (r,) in db.execute("select report from records where stage = 'quantize'")
        ]
    assert any(form.startswith("unrolled_gru x2") for form in report["converter_forms"]), report
    # the mask output is the mask input's own tensor: keyed as an output, not by its input key
    assert {t["signature"] for t in report["tflite"]["inputs"]} == {"src", "src_mask"}
    assert {t["signature"] for t in report["tflite"]["outputs"]} == {"output_0", "output_1", "output_2"}
    float32 = report["checks"]["float32"]  # compared output by output with the ONNX model's, by tie
    assert float32["cosine"] >= 0.999 and float32["max_abs_diff"] < 1e-4, float32
