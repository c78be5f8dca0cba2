"""Real models for the onnxruntime backend tests, imported once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from ort_helpers import rapidocr_model

from backends.passes.importer import import_model


def _imported(factory: pytest.TempPathFactory, source: Path, inputs: dict[str, list[int]], name: str) -> Path:
    model, _ = import_model(source, inputs, lambda _: None)
    path = factory.mktemp(name) / "model.onnx"
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


@pytest.fixture(scope="session")
def cls_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PP-OCR mobile text-direction classifier (Conv+BN+HardSwish, one MatMul head), opset raised."""
    source = rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx")
    return _imported(tmp_path_factory, source, {"x": [1, 3, 48, 192]}, "cls")
