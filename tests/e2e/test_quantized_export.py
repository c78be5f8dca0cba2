"""`npuctl init` and `apply` on a real model that ships already quantized: pipecat's smart-turn
end-of-turn detector (pipecat-ai 1.14.0, BSD-2-Clause: a Whisper-tiny encoder over `[1, 80, 800]`
log-mel features, one probability, written as Q/DQ int8 by ONNX Runtime's static quantizer).

A new user gets `mode: qat` from `init` (ptq would quantize it a second time, and validate says so),
and the cpu build runs the model's own int8; the decision agreement npuctl records is computed again
here against the model itself on ONNX Runtime."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.backends.tasks.task_models import wheel_file
from tests.conftest import run_npuctl

pytestmark = pytest.mark.slow

SMART_TURN = ("pipecat-ai==1.14.0", "pipecat", "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx")


def _features(count: int, seed: int) -> list[np.ndarray]:
    """Whisper-range log-mel features (its normalised features lie in about [-0.3, 1.8])."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-0.3, 1.8, (1, 80, 800)).astype(np.float32) for _ in range(count)]


def test_init_writes_qat_and_the_cpu_build_runs_the_models_own_int8(git_repo: Path) -> None:
    requirement, package, member = SMART_TURN
    source = wheel_file(requirement, package, member, (member,))
    (git_repo / "models").mkdir()
    shutil.copyfile(source, git_repo / "models" / "turn.onnx")
    evals = _features(6, seed=2)
    (git_repo / "data" / "eval").mkdir(parents=True)
    for k, x in enumerate(evals):
        np.save(git_repo / "data" / "eval" / f"{k}.npy", x)
    done = run_npuctl(git_repo, "init", "models/turn.onnx", "-t", "cpu", "-i", "input_features=1x80x800")
    assert done.returncode == 0, done.stdout + done.stderr
    spec = git_repo / "specs" / "turn-cpu.yaml"
    text = spec.read_text()
    assert "    mode: qat  # the model arrives quantized (DequantizeLinear x" in text, text
    assert "# task: {type: classification}  # CONFIRM" in text
    text = text.replace("# task: {type: classification}  # CONFIRM", "task: {type: classification}  #")
    text = text.replace("runner: local", "data: ../data/eval\n    runner: local").replace(
        "runs: 100", "runs: 3"
    )
    text = text.replace("{p90: FIXME}", "{p90: 100000}").replace("{max_drop: FIXME}", "{max_drop: 0.02}")
    spec.write_text(text)
    done = run_npuctl(git_repo, "apply", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with sqlite3.connect(git_repo / ".npuctl" / "state.db") as db:
        reports = {s: json.loads(r) for s, r in db.execute("select stage, report from records")}
    assert reports["quantize"]["mode"] == "qat" and reports["quantize"]["float_compute_ops"] == []
    lock = json.loads((git_repo / "specs" / "turn-cpu.lock.json").read_text())["variants"]["default"]
    recorded = lock["measurements"]["accuracy"]
    assert recorded["measure"] == "classification decision_agreement", recorded
    out = git_repo / "out"
    assert run_npuctl(git_repo, "export", "specs/turn-cpu.yaml", str(out)).returncode == 0
    (built,) = out.glob("*.ort")
    source_session, built_session = ort.InferenceSession(str(source)), ort.InferenceSession(str(built))
    agree = [
        (source_session.run(None, {"input_features": x})[0].item() > 0.5)
        == (built_session.run(None, {"input_features": x})[0].item() > 0.5)
        for x in evals
    ]
    assert recorded["value"] == pytest.approx(sum(agree) / len(agree))
