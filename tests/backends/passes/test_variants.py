"""The shape-variant manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.passes.variants import VariantResult, build_manifest, select, shape_key, write_manifest


def test_manifest_maps_shapes_to_artifacts(tmp_path: Path) -> None:
    a, b = tmp_path / "rec_640.rknn", tmp_path / "rec_320.rknn"
    a.write_bytes(b"wide")
    b.write_bytes(b"narrow")
    results = [
        VariantResult.from_file({"x": [1, 3, 48, 640]}, a),
        VariantResult.from_file({"x": [1, 3, 48, 320]}, b),
    ]
    manifest = build_manifest("ppocr-rec", "rk3588", results)
    assert [v["key"] for v in manifest["variants"]] == ["x=1x3x48x320", "x=1x3x48x640"]
    assert manifest["variants"][0]["artifact"]["size"] == 6
    chosen = select(manifest, {"x": [1, 3, 48, 640]})
    assert chosen is not None and chosen["artifact"]["file"] == "rec_640.rknn"
    assert select(manifest, {"x": [1, 3, 48, 100]}) is None
    path = write_manifest(tmp_path / "manifest.json", manifest)
    assert json.loads(path.read_text()) == manifest
    again = build_manifest("ppocr-rec", "rk3588", list(reversed(results)))
    assert json.dumps(again, sort_keys=True) == json.dumps(manifest, sort_keys=True)


def test_manifest_rejects_duplicates_and_mixed_inputs() -> None:
    r = VariantResult({"x": [1, 3]}, "a.onnx", "0" * 64)
    with pytest.raises(ValueError, match="two artifacts"):
        build_manifest("m", "cpu", [r, VariantResult({"x": [1, 3]}, "b.onnx", "1" * 64)])
    with pytest.raises(ValueError, match="different inputs"):
        build_manifest("m", "cpu", [r, VariantResult({"y": [1, 3]}, "b.onnx", "1" * 64)])
    assert shape_key({"b": [2], "a": [1, 2]}) == "a=1x2;b=2"
