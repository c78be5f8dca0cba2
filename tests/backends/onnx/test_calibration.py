"""Calibration ranges are cached by what determines them: changing only sensitive layers reuses them."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from quant_helpers import DIGITS_CALIB, digits_model, ptq_config, run_quantize

from backends.onnx import calibration
from backends.onnx.calibration import ChunkReader, Settings, cache_key


def test_changing_only_sensitive_layers_reuses_cached_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    first = run_quantize(ptq_config(samples=64), model, tmp_path / "a", cache_dir=cache)
    assert first.report["calibration"]["cache"] == "miss"
    assert len(list((cache / "calibration").glob("*.json"))) == 1

    def no_calibrator(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the calibrator ran although the ranges were cached")

    monkeypatch.setattr(calibration, "compute_ranges", no_calibrator)
    for module in ("onnxruntime.quantization.calibrate", "onnxruntime.quantization.quantize"):
        monkeypatch.setattr(importlib.import_module(module), "create_calibrator", no_calibrator)
    for i, rules in enumerate(
        ({"keep": "fp32", "op_types": ["Gemm"]}, {"keep": "int16", "first": 1}, {"keep": "fp32", "last": 2})
    ):
        out = run_quantize(
            ptq_config(samples=64, sensitive_layers=rules), model, tmp_path / f"b{i}", cache_dir=cache
        )
        assert out.report["calibration"]["cache"] == "hit"
        assert out.report["calibration"]["digest"] == first.report["calibration"]["digest"]
        assert out.report["kept"]
    weights = run_quantize(ptq_config(samples=64, weights="uint8"), model, tmp_path / "c", cache_dir=cache)
    assert (
        weights.report["calibration"]["cache"] == "hit"
    )  # the weight type does not change activation ranges


def test_a_change_in_samples_or_method_recalibrates(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    base = run_quantize(ptq_config(samples=32), model, tmp_path / "a", cache_dir=cache).report["calibration"]
    more = run_quantize(ptq_config(samples=33), model, tmp_path / "b", cache_dir=cache).report["calibration"]
    config = ptq_config(samples=32)
    config["calibration"]["method"] = "percentile"
    method = run_quantize(config, model, tmp_path / "c", cache_dir=cache).report["calibration"]
    assert more["cache"] == "miss" and method["cache"] == "miss"
    assert len({base["digest"], more["digest"], method["digest"]}) == 3


def test_the_key_follows_sample_content_not_names(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    files = sorted(DIGITS_CALIB.glob("*.npy"))[:4]
    key = cache_key(model, files, Settings())
    assert key == cache_key(model, files, Settings())
    assert key != cache_key(model, files, Settings(symmetric=True))
    assert key != cache_key(model, files, Settings(method="percentile", percentile=99.9))
    changed = tmp_path / "changed"
    changed.mkdir()
    copies = []
    for path in files:
        target = changed / path.name
        target.write_bytes(path.read_bytes())
        copies.append(target)
    assert cache_key(model, copies, Settings()) == key
    np.save(copies[0], np.load(copies[0]) + 1.0)
    assert cache_key(model, copies, Settings()) != key


def test_without_a_cache_folder_ranges_are_computed_and_the_report_says_so(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize(ptq_config(samples=16), model, tmp_path / "w")
    assert out.report["calibration"]["cache"] == "off"
    assert any("not cached" in note for note in out.report["notes"])
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["model.onnx", "quantize.log"]


def test_env_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_CACHE_DIR", str(tmp_path / "env"))
    model = digits_model(tmp_path)
    assert run_quantize(ptq_config(samples=8), model, tmp_path / "a").report["calibration"]["cache"] == "miss"
    assert run_quantize(ptq_config(samples=8), model, tmp_path / "b").report["calibration"]["cache"] == "hit"


def test_a_corrupt_cache_entry_is_recomputed(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    digest = run_quantize(ptq_config(samples=8), model, tmp_path / "a", cache_dir=cache).report[
        "calibration"
    ]["digest"]
    entry = cache / "calibration" / f"{digest}.json"
    first = hashlib.sha256(entry.read_bytes()).hexdigest()
    entry.write_text("{not json")
    again = run_quantize(ptq_config(samples=8), model, tmp_path / "b", cache_dir=cache).report["calibration"]
    assert again["cache"] == "miss" and hashlib.sha256(entry.read_bytes()).hexdigest() == first


def test_chunk_reader_protocol() -> None:
    feeds = [{"x": np.zeros(1)}, {"x": np.ones(1)}]
    reader = ChunkReader(feeds)
    assert len(reader) == 2
    assert reader.get_next() is feeds[0] and reader.get_next() is feeds[1] and reader.get_next() is None
    reader.rewind()
    assert reader.get_next() is feeds[0]
