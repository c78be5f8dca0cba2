"""Small real models and a stage-request helper for the RKNN tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rknn_helpers import Request, conv_model

from backends.catalog import Target, targets
from backends.sdk.base import StageRequest

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    return conv_model(tmp_path / "tiny.onnx")


@pytest.fixture
def calib_folder(tmp_path: Path) -> Path:
    """8 raw 16x16 RGB frames as uint8 NHWC .npy (what an application feeds)."""
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(8):
        np.save(folder / f"{i:04d}.npy", rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8))
    return folder


@pytest.fixture
def make_request(tmp_path: Path) -> Request:
    counter = {"n": 0}

    def make(
        stage: str, config: dict[str, Any], inputs: dict[str, Path], target: Target | None = None
    ) -> StageRequest:
        counter["n"] += 1
        work = tmp_path / f"work-{stage}-{counter['n']}"
        work.mkdir()
        return StageRequest(
            stage, target or targets()["rk3588"], config, inputs, work, work.parent / f"{work.name}.log"
        )

    return make
