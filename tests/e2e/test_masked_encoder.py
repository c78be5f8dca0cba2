"""`npuctl apply` on a real transformer encoder with a boolean padding mask (khmersm's Khmer word
segmenter: a PyTorch `nn.TransformerEncoder`, int64 character ids, `mask` true at real characters,
per-character B/I emissions) for the NPU targets whose compilers take it: the rewrite stage fires and
raises the predicted coverage, int8 builds, the vendor's report gives the coverage, and the accuracy is
the tokens task over the unpadded characters."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.backends.tasks.task_models import segmenter, segmenter_feeds

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: seg}}
spec:
  model: {{path: ../models/seg.onnx}}
  target: {target}
  inputs: {{x: [1, 32], mask: [1, 32]}}
  rewrite: {{replace_unsupported: true}}
  quantization:
    mode: ptq
    calibration: {{data: ../data/calib, samples: 8}}
  evaluate:
    data: ../data/eval
    task: {{type: tokens, mask: mask, pad_value: 0}}
    warmup: 0
    runs: 2
  slo:
    accuracy: {{max_drop: 0.5}}
"""


def _apply(repo: Path, target: str, npuctl: Any) -> dict[str, Any]:
    (repo / "models").mkdir()
    shutil.copyfile(segmenter(), repo / "models" / "seg.onnx")
    feeds = segmenter_feeds(10, seed=3)
    for folder, chosen in (("calib", feeds[:8]), ("eval", feeds[8:])):
        (repo / "data" / folder).mkdir(parents=True)
        for i, feed in enumerate(chosen):
            np.savez(repo / "data" / folder / f"{i:02d}.npz", **feed)
    (repo / "specs" / "seg.yaml").write_text(SPEC.format(target=target))
    done = npuctl(repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    lock = json.loads((repo / "specs" / "seg.lock.json").read_text())
    with sqlite3.connect(repo / ".npuctl" / "state.db") as db:
        (report,) = [
            json.loads(r) for (r,) in db.execute("select report from records where stage = 'rewrite'")
        ]
    return {"measurements": lock["variants"]["default"]["measurements"], "rewrite": report}


def _common(found: dict[str, Any]) -> dict[str, Any]:
    rewrite = found["rewrite"]
    assert rewrite["rewrites"], "rewrites fired"
    nodes = rewrite["coverage"]["nodes"]
    assert nodes["after"] > nodes["before"], nodes
    accuracy = found["measurements"]["accuracy"]
    assert accuracy["measure"] == "tokens token_agreement"
    assert "unpadded of 64 positions (mask mask" in accuracy["detail"]
    assert accuracy["value"] >= 0.8
    return found["measurements"]["npu_coverage"]


@pytest.mark.slow
def test_the_encoder_builds_for_rk3588_with_the_toolkit_s_own_coverage(git_repo: Path, npuctl: Any) -> None:
    coverage = _common(_apply(git_repo, "rk3588", npuctl))
    assert "rknn-toolkit2" in coverage["detail"] and "build layer table" in coverage["detail"]
    assert coverage["value"] > 0.8


@pytest.mark.slow
def test_the_encoder_builds_for_the_qnn_htp_with_its_layernorms_and_mask_on_it(
    git_repo: Path, npuctl: Any
) -> None:
    """The HTP validates an 8-bit LayerNorm only with an unsigned scale, and the -inf mask's ops stay
    float: every node but the output's DequantizeLinear in the context."""
    coverage = _common(_apply(git_repo, "qualcomm-htp-v75", npuctl))
    assert "EPContext partitioning" in coverage["detail"] and coverage["value"] > 0.99
