"""A graph QNN splits: g2p-id-py's BERT (tf2onnx, Apache-2.0) holds an Einsum equation the HTP refuses
(`abcd,cde->abe`), so onnxruntime-qnn compiles two HTP partitions with that node on the CPU between
them, in one context binary. The build is a real deployment (ONNX Runtime runs the CPU part): it
compiles, passes its check, runs on the simulator, and its coverage is QNN's own partitioning."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tests.backends.tasks.task_models import wheel_file
from tests.conftest import git, run_npuctl

pytest.importorskip("onnxruntime_qnn")

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: bert}
spec:
  model: {path: ../models/bert.onnx}
  target: qualcomm-htp-v75
  inputs: {input_1: [1, 32]}
  quantization:
    mode: ptq
    calibration: {data: ../data/ids, samples: 4}
  evaluate: {data: ../data/ids, warmup: 0, runs: 2}
"""


def test_a_model_split_into_several_htp_partitions_builds_and_records_qnns_coverage(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    for sub in ("specs", "models", "data/ids"):
        (repo / sub).mkdir(parents=True)
    source = wheel_file(
        "g2p-id-py==0.4.2", "g2p_id", "models/bert/bert_mlm.onnx", ("models/bert/bert_mlm.onnx",)
    )
    (repo / "models" / "bert.onnx").write_bytes(source.read_bytes())
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(repo / "data" / "ids" / f"{i}.npz", input_1=rng.integers(1, 32, (1, 32), dtype=np.int64))
    (repo / "specs" / "bert.yaml").write_text(SPEC)
    result = run_npuctl(repo, "apply", "--json", timeout=1800)
    assert result.returncode in (0, 3), result.stdout[-3000:] + result.stderr[-3000:]
    (spec,) = json.loads(result.stdout)["specs"]
    stages = {s["name"]: s for s in spec["stages"]}
    assert stages["compile"]["action"] == "built" and stages["evaluate"]["action"] == "built", stages
    assert "HTP partitions with the CPU between them" in stages["compile"]["note"]
    lock = json.loads((repo / "specs" / "bert.lock.json").read_text())
    with sqlite3.connect(repo / ".npuctl" / "state.db") as db:
        (report,) = [
            json.loads(r) for (r,) in db.execute("select report from records where stage = 'compile'")
        ]
    assert report["epcontext"]["partitions"] >= 2
    coverage = lock["variants"]["default"]["measurements"]["npu_coverage"]
    assert coverage["evidence"] == "estimated: onnxruntime-qnn" and 0 < coverage["value"] < 1
